//! Cutting text to a byte budget without splitting a UTF-8 character (the
//! apiserver's annotation and Event limits, and our own are in bytes), and
//! making text from the cluster safe to print on a terminal; and the
//! Kubernetes name rules (DNS labels and subdomains, label and annotation keys).

use std::borrow::Cow;

/// The longest prefix of `s` that is at most `max` bytes and ends on a
/// character boundary.
pub(crate) fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` itself if it fits in `max` bytes, else its [`prefix`] followed by `...`.
pub(crate) fn ellipsize(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_owned()
    } else {
        format!("{}...", prefix(s, max))
    }
}

/// The most bytes of one piece of user input (an annotation, a name, a
/// value) that a message quotes: a denial, a warning, an audit record or a
/// log line stays short whatever the input's size.
pub(crate) const QUOTE_BYTES: usize = 200;

/// `s` as every message quotes user input: at most [`QUOTE_BYTES`] of it,
/// [`printable`], and how many bytes were left out when some were.
pub(crate) fn quote(s: &str) -> Quoted<'_> {
    Quoted(s)
}

/// `s` cut to [`QUOTE_BYTES`], for a structured field (an audit record's,
/// JSON-escaped there) that quotes user input.
pub(crate) fn clip(s: &str) -> &str {
    prefix(s, QUOTE_BYTES)
}

/// What [`quote`] shows.
#[derive(Clone, Copy)]
pub(crate) struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = prefix(self.0, QUOTE_BYTES);
        f.write_str(&printable(shown))?;
        match self.0.len() - shown.len() {
            0 => Ok(()),
            left => write!(f, "... ({left} more bytes)"),
        }
    }
}

impl std::fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// A character a terminal may act on instead of showing: C0 and C1
/// controls, DEL, and the bidirectional overrides and isolates.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// JSON text with the characters serde_json leaves raw that a terminal may
/// act on (DEL, C1 controls, bidi overrides) written as `\uXXXX` escapes:
/// still the same JSON. Outside strings JSON holds none of them.
pub(crate) fn printable_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if unsafe_char(c) && c != '\n' {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` with every character a terminal would act on instead of show
/// escaped as `\u{..}` (`\n`, `\t`, `\r` as such): C0 and C1 controls, DEL,
/// and the bidirectional overrides and isolates that reorder what follows.
/// Text read from the cluster (annotations, names, messages) is anyone's to
/// write: an escape sequence could erase or rewrite lines of a report, and a
/// newline could forge one.
pub(crate) fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A DNS-1123 label (a namespace's name): 1 to 63 of `a-z`, `0-9` and `-`,
/// not starting or ending with `-`.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain (most objects' names): at most 253 bytes of
/// [`is_dns_label`]s joined by `.`.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label name or value: at most 63 characters, alphanumeric at both ends,
/// `-`, `_` and `.` between (apimachinery's `IsQualifiedName` name part and
/// `IsValidLabelValue`).
pub(crate) fn is_label_name(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.len() <= 63
        && alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A label or annotation key: `name` or `prefix/name`, the prefix a DNS
/// subdomain (apimachinery's `IsQualifiedName`).
pub(crate) fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => is_label_name(s),
        Some((prefix, name)) => is_label_name(name) && is_dns_subdomain(prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary() {
        let cases = [
            ("short", 10, "short", "short"),
            ("exactly", 7, "exactly", "exactly"),
            ("abcdef", 3, "abc", "abc..."),
            // "é" is two bytes: a cut inside it backs off to before it.
            ("aé", 2, "a", "a..."),
            ("éé", 3, "é", "é..."),
            ("", 0, "", ""),
        ];
        for (s, max, cut, shown) in cases {
            assert_eq!(prefix(s, max), cut, "{s:?} {max}");
            assert_eq!(ellipsize(s, max), shown, "{s:?} {max}");
        }
    }

    #[test]
    fn terminal_controls_are_shown_not_acted_on() {
        let cases = [
            ("INC-1 plain é", "INC-1 plain é"),
            ("a\x1b[2K\rb", "a\\u{1b}[2K\\rb"),
            ("two\nlines\t", "two\\nlines\\t"),
            ("\u{9b}31m \u{7f}", "\\u{9b}31m \\u{7f}"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
        ];
        for (raw, shown) in cases {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
        assert!(matches!(printable("clean"), Cow::Borrowed(_)));
    }
}
