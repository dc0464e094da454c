//! Cutting text to a byte budget without splitting a UTF-8 character (the
//! apiserver's annotation and Event limits, and our own are in bytes).

/// The longest prefix of `s` that is at most `max` bytes and ends on a
/// character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
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
pub fn ellipsize(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_owned()
    } else {
        format!("{}...", prefix(s, max))
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
}
