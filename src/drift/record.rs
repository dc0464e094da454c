//! The warn-mode drift record, annotation `driftguard.io/drift`: who drifted
//! which paths, when. The mutating webhook writes it and the validating one
//! checks that a changed record is exactly the one driftguard writes for that
//! very write (anything else is forged). It is bounded: a write drifting
//! 100,000 paths must not grow the annotation until the apiserver refuses the
//! object (256 KiB for all annotations), so it keeps the first paths within
//! [`MAX_PATHS`] and [`MAX_PATH_BYTES`] and counts the rest in `omitted`.

use serde_json::{Value, json};

/// Paths kept in the record at most.
pub const MAX_PATHS: usize = 20;
/// Bytes of kept paths at most (a single longer path is counted, not kept).
pub const MAX_PATH_BYTES: usize = 2048;

/// The record for `user` drifting `paths` at `time` (RFC 3339 text).
pub fn record(user: &str, time: &str, paths: &[String]) -> Value {
    let mut kept = Vec::new();
    let mut bytes = 0;
    for path in paths {
        if kept.len() == MAX_PATHS || bytes + path.len() > MAX_PATH_BYTES {
            break;
        }
        bytes += path.len();
        kept.push(path);
    }
    let mut record = json!({"user": user, "time": time, "paths": kept});
    if kept.len() < paths.len() {
        record["omitted"] = json!(paths.len() - kept.len());
    }
    record
}

/// Whether `written` (the annotation's value) is the record driftguard
/// writes for `user` drifting `paths`, at a time `fresh` accepts.
pub fn is_ours(written: &str, user: &str, paths: &[String], fresh: impl Fn(&str) -> bool) -> bool {
    let Ok(parsed) = serde_json::from_str::<Value>(written) else {
        return false;
    };
    let Some(time) = parsed["time"].as_str().filter(|t| fresh(t)) else {
        return false;
    };
    parsed == record(user, time, paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(n: usize, len: usize) -> Vec<String> {
        (0..n).map(|i| format!("/data/{i:0len$}")).collect()
    }

    #[test]
    fn the_record_is_bounded_and_counts_what_it_leaves_out() {
        let time = "2026-12-01T10:00:00Z";
        let few = paths(3, 4);
        let r = record("alice", time, &few);
        assert_eq!(r, json!({"user": "alice", "time": time, "paths": few}));
        for (n, len) in [(100_000, 4), (30, 500), (1, 5000)] {
            let many = paths(n, len);
            let r = record("alice", time, &many);
            let kept = r["paths"].as_array().unwrap().len();
            assert!(kept <= MAX_PATHS, "{n}");
            assert_eq!(r["omitted"], json!(n - kept), "{n}");
            assert!(r.to_string().len() < MAX_PATH_BYTES + 200, "{n}");
            assert!(is_ours(&r.to_string(), "alice", &many, |_| true));
        }
    }

    #[test]
    fn only_the_exact_record_is_ours() {
        let p = paths(30, 4);
        let text = record("alice", "2026-12-01T10:00:00Z", &p).to_string();
        assert!(is_ours(&text, "alice", &p, |_| true));
        assert!(!is_ours(&text, "alice", &p, |_| false), "stale");
        assert!(!is_ours(&text, "bob", &p, |_| true), "another user");
        assert!(!is_ours(&text, "alice", &p[1..], |_| true), "other paths");
        let mut forged: Value = serde_json::from_str(&text).unwrap();
        forged["omitted"] = json!(1);
        assert!(!is_ours(&forged.to_string(), "alice", &p, |_| true));
        assert!(!is_ours("not json", "alice", &p, |_| true));
    }
}
