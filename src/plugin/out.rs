//! Everything the plugin prints goes through [`Out`], which escapes what a
//! terminal would act on instead of show ([`printable`]). Text read from the
//! cluster is anyone's to write: one print that forgot to escape it could
//! erase or forge lines of a report. `println!` and its kin are denied in the
//! plugin (src/plugin.rs), so no print can go around `Out`.

use std::fmt::Display;
use std::io::{IsTerminal, Write};

use crate::text::printable;

/// Colors for the few words that carry the answer: only when stdout is a
/// terminal and NO_COLOR is not set, so pipes and scripts get plain text.
#[derive(Clone, Copy)]
pub(crate) enum Color {
    Green,
    Red,
}

enum Sink {
    Stdout,
    Stderr,
    #[cfg(test)]
    Buffer(Vec<u8>),
}

/// stdout or stderr, one line at a time, every character a terminal would
/// act on escaped (`\n` too: a line ends only where [`Out::line`] ends it).
pub(crate) struct Out {
    sink: Sink,
    color: bool,
    /// The line being written, escaped.
    pending: String,
}

/// `outln!(out, "format", args...)`: one escaped line on `out`.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}

/// `errln!("format", args...)`: one escaped line on stderr.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::plugin::out::Out::stderr().line(format_args!($($arg)*))
    };
}

pub(crate) use {errln, outln};

impl Out {
    #[allow(clippy::disallowed_methods)] // the one place stdout is written
    pub fn stdout() -> Self {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Out::to(Sink::Stdout, color)
    }

    pub fn stderr() -> Self {
        Out::to(Sink::Stderr, false)
    }

    fn to(sink: Sink, color: bool) -> Self {
        Out {
            sink,
            color,
            pending: String::new(),
        }
    }

    /// Adds `text` to the line.
    pub fn text(&mut self, text: impl Display) -> &mut Self {
        self.pending.push_str(&printable(&text.to_string()));
        self
    }

    /// Adds `text` to the line, in `color` on a terminal.
    pub fn paint(&mut self, text: &str, color: Color) -> &mut Self {
        if !self.color {
            return self.text(text);
        }
        let code = match color {
            Color::Green => 32,
            Color::Red => 31,
        };
        self.pending.push_str(&format!("\x1b[{code}m"));
        self.text(text);
        self.pending.push_str("\x1b[0m");
        self
    }

    /// Ends the line with `text` and writes it.
    pub fn line(&mut self, text: impl Display) {
        self.text(text);
        self.pending.push('\n');
        let line = std::mem::take(&mut self.pending);
        self.emit(&line);
    }

    /// JSON or YAML: its line breaks kept, each line escaped (which leaves
    /// one from `print_structured` as it is: its own escapes came first).
    pub fn document(&mut self, text: &str) {
        let lines: Vec<_> = text.split('\n').map(printable).collect();
        self.emit(&(lines.join("\n") + "\n"));
    }

    /// Like `println!`, a line that cannot be written is a panic.
    #[allow(clippy::disallowed_methods)] // the one place stdout and stderr are written
    fn emit(&mut self, text: &str) {
        let written = match &mut self.sink {
            Sink::Stdout => std::io::stdout().lock().write_all(text.as_bytes()),
            Sink::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
            #[cfg(test)]
            Sink::Buffer(b) => b.write_all(text.as_bytes()),
        };
        if let Err(e) = written {
            panic!("failed printing: {e}");
        }
    }
}

#[cfg(test)]
impl Out {
    /// An `Out` into memory, colored as a terminal would be.
    pub fn buffer() -> Self {
        Out::to(Sink::Buffer(Vec::new()), true)
    }

    /// What was written.
    pub fn written(&self) -> &str {
        match &self.sink {
            Sink::Buffer(b) => std::str::from_utf8(b).unwrap(),
            _ => "",
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Strings full of what a terminal acts on: C0, C1, DEL, ESC sequences,
    /// bidi overrides, line breaks.
    pub(crate) fn hostile() -> impl Strategy<Value = String> {
        "([a-z \u{1b}\r\n\t\u{7f}\u{85}\u{9b}\u{200e}\u{202e}\u{2066}\u{0}-\u{1f}\u{80}-\u{9f}]|\u{1b}\\[2K){0,24}"
    }

    /// What may be left in text written through `Out` but its own line
    /// breaks and the color codes it paints with.
    pub(crate) fn acted_on(written: &str) -> Option<char> {
        let plain = written
            .replace("\x1b[31m", "")
            .replace("\x1b[32m", "")
            .replace("\x1b[0m", "");
        plain
            .chars()
            .find(|&c| printable(&c.to_string()) != c.to_string() && c != '\n')
    }

    proptest! {
        #[test]
        fn no_raw_control_reaches_the_terminal(a in hostile(), b in hostile(), c in hostile()) {
            let mut out = Out::buffer();
            out.text(&a).paint(&b, Color::Red).line(&c);
            outln!(out, "{a} and {b:?}: {c}");
            let written = out.written();
            prop_assert_eq!(acted_on(written), None, "{:?}", written);
            prop_assert_eq!(written.matches('\n').count(), 2, "{:?}", written);
            // A document keeps its line breaks, and nothing else.
            let mut doc = Out::buffer();
            doc.document(&format!("{a}\n{b}"));
            prop_assert_eq!(acted_on(doc.written()), None, "{:?}", doc.written());
        }
    }

    #[test]
    fn the_plugins_own_text_is_unchanged_and_colors_only_on_a_terminal() {
        let mut out = Out::buffer();
        outln!(out, "status: {}", "ok é");
        out.text("verdict: ").paint("denied", Color::Red).line("");
        assert_eq!(
            out.written(),
            "status: ok é\nverdict: \x1b[31mdenied\x1b[0m\n"
        );
        let mut plain = Out::to(Sink::Buffer(Vec::new()), false);
        plain
            .text("verdict: ")
            .paint("denied\x1b[2K", Color::Red)
            .line("");
        assert_eq!(plain.written(), "verdict: denied\\u{1b}[2K\n");
    }
}
