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

/// Installs the global subscriber: audit lines to `audit`, diagnostics to
/// stderr in `format`. Later calls do nothing.
pub fn init_to(format: LogFormat, audit: impl std::io::Write + Send + 'static) {
    let is_audit = filter::filter_fn(|meta| meta.target() == audit::TARGET);
    let not_audit = filter::filter_fn(|meta| meta.target() != audit::TARGET);
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let diagnostics = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
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
