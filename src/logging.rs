//! Two streams: audit records (target `driftguard::audit`) as bare JSON lines on
//! stdout, through a bounded queue that never blocks a decision
//! ([`audit_writer`]), and diagnostic logs, text or JSON, on stderr
//! (`RUST_LOG` filters them).

pub mod audit_writer;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, filter};

use crate::audit;

/// The format of diagnostic logs (`--log-format`): `json`, one object a
/// line for log collectors, or `text`. Audit lines are always JSON.
// clap would show variant docs as each value's help: documented here instead.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Queues the `record` field of audit events, and nothing else, as one line.
struct AuditLayer;

struct RecordField(Option<String>);

impl Visit for RecordField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "record" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "record" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber> Layer<S> for AuditLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut field = RecordField(None);
        event.record(&mut field);
        if let Some(line) = field.0 {
            audit_writer::submit(line);
        }
    }
}

/// [`init_to`] stdout.
pub(crate) fn init(format: LogFormat) {
    init_to(format, std::io::stdout());
}

/// Stderr, one line per diagnostic: the formatter writes each event whole,
/// and a newline inside it (a tenant's selector or name in an error) is
/// written as `\n`. In text format nothing logged can otherwise start a
/// line of its own, such as one `driftguard report` would read as an audit
/// record (JSON format escapes it already).
struct OneLine;

impl std::io::Write for OneLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&one_line(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `buf` with every `\n` and `\r` but a final newline escaped.
fn one_line(buf: &[u8]) -> Vec<u8> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let mut out = Vec::with_capacity(buf.len() + 8);
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b => out.push(b),
        }
    }
    if body.len() < buf.len() {
        out.push(b'\n');
    }
    out
}

/// Installs the global subscriber: audit lines to `audit`, diagnostics to
/// stderr in `format`. Later calls do nothing.
pub fn init_to(format: LogFormat, audit: impl std::io::Write + Send + 'static) {
    let is_audit = filter::filter_fn(|meta| meta.target() == audit::TARGET);
    let not_audit = filter::filter_fn(|meta| meta.target() != audit::TARGET);
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let diagnostics = tracing_subscriber::fmt::layer()
        .with_writer(|| OneLine)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let diagnostics = match format {
        LogFormat::Json => diagnostics.json().with_current_span(true).boxed(),
        LogFormat::Text => diagnostics.boxed(),
    };
    audit_writer::start_to(audit);
    let _ = tracing_subscriber::registry()
        .with(AuditLayer.with_filter(is_audit))
        .with(diagnostics.with_filter(not_audit).with_filter(env))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// A logged string holding a JSON line, as a tenant's selector can, does
    /// not become a line that `driftguard report` reads as a record.
    #[test]
    fn a_logged_newline_cannot_start_a_line() {
        let forged = "WARN bad selector \"a=\n{\"verdict\":\"audit\",\"reason\":\"drift\"}\r\n\"\n";
        let written = String::from_utf8(one_line(forged.as_bytes())).unwrap();
        assert_eq!(written.matches('\n').count(), 1, "{written}");
        assert!(written.ends_with('\n') && !written.contains('\r'));
        let mut report = crate::audit::report::Report::default();
        written.lines().for_each(|l| report.add_line(l));
        assert!(report.render(5).starts_with("0 decisions"));
    }
}
