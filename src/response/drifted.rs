//! The drifted paths of a decision in a form a client reads whole, written
//! by the webhook and read by `kubectl driftguard preview`: one contract, one
//! module.
//!
//! - A denial carries each path in its Status's `details.causes`, one
//!   [`DRIFTED`] cause per path (`field` = the RFC 6901 pointer, `""` the
//!   whole object). The apiserver passes a webhook's Status through to the
//!   client unchanged but for the message prefix (k8s.io/apiserver
//!   `pkg/admission/plugin/webhook/errors.ToStatusErr`), so the paths arrive
//!   whole, unlike the message, which names five.
//! - A write allowed with warnings (warn and audit mode, dry runs, break-glass)
//!   has no Status a client sees: each path is one `driftguard: drifted PATH`
//!   warning. The apiserver's client conventions keep warnings short, so
//!   [`super::limit`] cuts a long one, and the reader then says the paths are
//!   incomplete rather than report a cut path.
//!
//! Both are bounded: a huge object's thousands of paths become the first
//! ones and a count of the rest.

use kube::core::response::{StatusCause, StatusDetails};

/// The cause reason of one drifted path, as the apiserver names a field a
/// write may not set.
pub(crate) const DRIFTED: &str = "FieldValueForbidden";
/// The cause reason of the count of paths not listed.
pub(crate) const OMITTED: &str = "DriftguardPathsOmitted";
/// Paths carried as causes at most.
pub(crate) const MAX_CAUSES: usize = 200;
/// All causes' paths together stay under this many bytes.
const MAX_CAUSE_BYTES: usize = 32 * 1024;
/// Paths carried as warnings at most: the verdict's own warnings follow them
/// and must stay within the warnings' 4 KiB.
pub(crate) const MAX_PATH_WARNINGS: usize = 10;

/// The prefix of a warning naming one drifted path.
const WARNING_PREFIX: &str = "driftguard: drifted ";
/// The prefix of the warning counting the paths not named.
const MORE_PREFIX: &str = "driftguard: drifted paths not named: ";

/// `details` for a denial of `name` (`resource` in `group`) drifting at `paths`.
pub(crate) fn details(group: &str, resource: &str, name: &str, paths: &[String]) -> StatusDetails {
    let mut causes = Vec::new();
    let mut bytes = 0;
    for path in paths {
        if causes.len() == MAX_CAUSES || bytes + path.len() > MAX_CAUSE_BYTES {
            break;
        }
        bytes += path.len();
        causes.push(StatusCause {
            reason: DRIFTED.into(),
            message: "drifts from Git".into(),
            field: path.clone(),
        });
    }
    let omitted = paths.len() - causes.len();
    if omitted > 0 {
        causes.push(StatusCause {
            reason: OMITTED.into(),
            message: format!("{omitted} more drifted paths not listed"),
            field: String::new(),
        });
    }
    StatusDetails {
        name: name.into(),
        group: group.into(),
        kind: resource.into(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    }
}

/// One warning per path, then one counting the rest.
pub(crate) fn warnings(paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = paths
        .iter()
        .take(MAX_PATH_WARNINGS)
        .map(|p| format!("{WARNING_PREFIX}{}", super::show_path(p)))
        .collect();
    if paths.len() > MAX_PATH_WARNINGS {
        out.push(format!("{MORE_PREFIX}{}", paths.len() - MAX_PATH_WARNINGS));
    }
    out
}

/// Drifted paths as a client read them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Read {
    /// Whole paths, in the webhook's order, each once.
    pub(crate) paths: Vec<String>,
    /// Paths the webhook named only cut, or counted without naming.
    pub(crate) missing: usize,
}

impl Read {
    fn add(&mut self, path: &str) {
        if !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.to_owned());
        }
    }
}

/// The paths of a denial's Status `details`.
pub(crate) fn from_details(details: Option<&StatusDetails>) -> Read {
    let mut read = Read::default();
    for cause in details.iter().flat_map(|d| &d.causes) {
        match cause.reason.as_str() {
            DRIFTED => read.add(&cause.field),
            OMITTED => read.missing += count(&cause.message),
            _ => {}
        }
    }
    read
}

/// The paths named in warnings (the `Warning:` headers of a reply).
pub(crate) fn from_warnings(warnings: &[String]) -> Read {
    let mut read = Read::default();
    for w in warnings {
        if let Some(n) = w.strip_prefix(MORE_PREFIX) {
            read.missing += count(n);
        } else if let Some(path) = w.strip_prefix(WARNING_PREFIX) {
            if super::is_cut(w) {
                read.missing += 1;
            } else if path == super::WHOLE_OBJECT {
                read.add("");
            } else if path.starts_with('/') {
                read.add(path);
            }
        } else if w == super::OMITTED_WARNINGS {
            // Which warnings went is unknown: paths may be among them.
            read.missing += 1;
        }
    }
    read
}

/// The leading number of `text`; 1 when there is none (at least one is missing).
fn count(text: &str) -> usize {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn paths(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("/data/KEY_{i}")).collect()
    }

    #[test]
    fn every_path_is_one_cause_and_reads_back_whole() {
        let long = format!("/data/{}", "k".repeat(300));
        let mut all = paths(7);
        all.push(long.clone());
        all.push(String::new());
        let d = details("", "configmaps", "settings", &all);
        assert_eq!(d.causes.len(), all.len());
        assert_eq!(d.causes[7].field, long);
        assert_eq!(d.causes[0].reason, DRIFTED);
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["causes"][0]["field"], "/data/KEY_0");
        assert_eq!(json["causes"][0]["reason"], "FieldValueForbidden");
        assert_eq!(json["kind"], "configmaps");
        let status = Status::failure("denied", "Forbidden").with_details(d);
        // As a client reads it from the wire.
        let wire: Status = serde_json::from_slice(&serde_json::to_vec(&status).unwrap()).unwrap();
        assert_eq!(
            from_details(wire.details.as_ref()),
            Read {
                paths: all,
                missing: 0
            }
        );
    }

    #[test]
    fn causes_are_bounded_with_a_count() {
        let all = paths(5000);
        let d = details("apps", "deployments", "x", &all);
        assert_eq!(d.causes.len(), MAX_CAUSES + 1);
        assert_eq!(d.causes[MAX_CAUSES].reason, OMITTED);
        let read = from_details(Some(&d));
        assert_eq!(read.paths, all[..MAX_CAUSES]);
        assert_eq!(read.missing, 5000 - MAX_CAUSES);

        let huge: Vec<String> = (0..100)
            .map(|i| format!("/{i}{}", "x".repeat(1000)))
            .collect();
        let d = details("", "configmaps", "x", &huge);
        let bytes: usize = d.causes.iter().map(|c| c.field.len()).sum();
        assert!(bytes <= MAX_CAUSE_BYTES, "{bytes}");
        let read = from_details(Some(&d));
        assert!(read.missing > 0, "{read:?}");
        assert_eq!(read.paths, huge[..100 - read.missing]);
    }

    #[test]
    fn warnings_read_back_and_say_what_is_missing() {
        let all = paths(3);
        let read = from_warnings(&super::super::limit(warnings(&all)));
        assert_eq!(
            read,
            Read {
                paths: all,
                missing: 0
            }
        );

        let all = paths(MAX_PATH_WARNINGS + 4);
        let read = from_warnings(&super::super::limit(warnings(&all)));
        assert_eq!(read.paths, all[..MAX_PATH_WARNINGS]);
        assert_eq!(read.missing, 4);

        let long = format!("/data/{}", "k".repeat(200));
        let read = from_warnings(&super::super::limit(warnings(&[long, "/a".into()])));
        assert_eq!(
            read,
            Read {
                paths: vec!["/a".into()],
                missing: 1
            }
        );

        let whole = from_warnings(&warnings(&[String::new()]));
        assert_eq!(whole.paths, [""]);
    }
}
