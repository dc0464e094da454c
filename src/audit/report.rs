//! `driftguard report`: reads the audit records of a trial in audit or warn
//! mode and says what enforcing would have denied, by object, user and path,
//! with the ignore rules that would let the frequent paths through: the step
//! between installing in audit mode and turning enforce on.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::BufRead;

use serde::Deserialize;

/// Distinct objects, users or paths counted; past it, new ones are counted
/// under "others" (a month of logs stays a few MiB).
const DISTINCT: usize = 100_000;

/// The fields of an audit record the report reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    verdict: String,
    reason: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    drifted_paths: Vec<String>,
    #[serde(default)]
    dry_run: bool,
}

/// Counts by key, at most [`DISTINCT`] keys; the rest in `.1`.
#[derive(Default)]
struct Tally(HashMap<String, u64>, u64);

impl Tally {
    fn add(&mut self, key: String) {
        if self.0.len() < DISTINCT || self.0.contains_key(&key) {
            *self.0.entry(key).or_default() += 1;
        } else {
            self.1 += 1;
        }
    }

    /// The `n` largest, largest first, ties by key.
    fn top(&self, n: usize) -> Vec<(&str, u64)> {
        let mut all: Vec<_> = self.0.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all.truncate(n);
        all
    }
}

/// What a trial's audit records add up to.
#[derive(Default)]
pub(crate) struct Report {
    decisions: u64,
    by_verdict: BTreeMap<String, u64>,
    /// Writes allowed only because of the mode (audit or warn): enforce denies them.
    would_deny: u64,
    namespaces: Tally,
    objects: Tally,
    users: Tally,
    /// `group\tKind\tpath` of the would-be denials.
    paths: Tally,
    /// Lines that are not decision records (guarded changes, other logs).
    other_lines: u64,
}

impl Report {
    /// Reads audit records, one JSON line each, to the end of `input`.
    pub(crate) fn read(input: impl BufRead) -> std::io::Result<Self> {
        let mut report = Self::default();
        for line in input.lines() {
            report.add_line(&line?);
        }
        Ok(report)
    }

    /// Counts one log line: a decision record, or another line.
    pub(crate) fn add_line(&mut self, line: &str) {
        match serde_json::from_str::<Record>(line) {
            Ok(record) => self.count(record),
            Err(_) => self.other_lines += 1,
        }
    }

    fn count(&mut self, r: Record) {
        self.decisions += 1;
        *self.by_verdict.entry(r.verdict.clone()).or_default() += 1;
        // A scale write whose parent was unreadable is warned in enforce too
        // (unknownScaleParent), and a dry run changed nothing.
        let allowed_by_mode = matches!(r.verdict.as_str(), "audit" | "warn");
        if !allowed_by_mode || r.dry_run || r.reason == "scale-parent-unknown" {
            return;
        }
        self.would_deny += 1;
        let group = if r.group.is_empty() { "core" } else { &r.group };
        self.objects
            .add(format!("{group}/{} {}/{}", r.kind, r.namespace, r.name));
        self.namespaces.add(if r.namespace.is_empty() {
            "(cluster-scoped)".into()
        } else {
            r.namespace
        });
        self.users.add(r.user);
        for path in r.drifted_paths {
            self.paths.add(format!("{}\t{}\t{path}", r.group, r.kind));
        }
    }

    /// The report as text, `top` rows per table.
    pub(crate) fn render(&self, top: usize) -> String {
        let mut out = String::new();
        let verdicts: Vec<String> = self
            .by_verdict
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "{} decisions ({})",
            self.decisions,
            verdicts.join(", ")
        );
        let _ = writeln!(
            out,
            "{} writes allowed only by audit or warn mode: enforce would deny them",
            self.would_deny
        );
        let tables = [
            ("namespaces", &self.namespaces),
            ("objects", &self.objects),
            ("users", &self.users),
        ];
        for (title, tally) in tables {
            let _ = writeln!(out, "\nTop {title}:");
            for (key, n) in tally.top(top) {
                let _ = writeln!(out, "  {n:>6}  {key}");
            }
            if tally.1 > 0 {
                let _ = writeln!(out, "  {:>6}  (others)", tally.1);
            }
        }
        self.render_rules(top, &mut out);
        if self.other_lines > 0 {
            let _ = writeln!(
                out,
                "\n({} lines were not decision records)",
                self.other_lines
            );
        }
        out
    }

    /// The paths drifted more than once, as ignore rules to paste.
    fn render_rules(&self, top: usize, out: &mut String) {
        let frequent: Vec<_> = self
            .paths
            .top(top)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        if frequent.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nPaths drifted most often. Where a change is expected (an autoscaler, a \
             mutating webhook), ignore it before enforcing; otherwise make it in Git:\n\
             ignoreDifferences:"
        );
        for (key, n) in frequent {
            let mut parts = key.splitn(3, '\t');
            if let (Some(group), Some(kind), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            {
                let _ = writeln!(
                    out,
                    "  # {n} writes\n  - {{group: \"{group}\", kind: {kind}, jsonPointers: [\"{path}\"]}}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(verdict: &str, reason: &str, user: &str, paths: &[&str], dry_run: bool) -> String {
        serde_json::json!({"verdict": verdict, "reason": reason, "user": user, "group": "apps",
            "kind": "Deployment", "namespace": "shop", "name": "web",
            "driftedPaths": paths, "dryRun": dry_run, "latencyMicros": 80})
        .to_string()
    }

    #[test]
    fn counts_what_enforce_would_deny_and_suggests_the_frequent_paths() {
        let log = [
            line("audit", "drift", "alice", &["/spec/replicas"], false),
            line(
                "audit",
                "drift",
                "bob",
                &["/spec/replicas", "/metadata/labels/x"],
                false,
            ),
            line("warn", "drift", "alice", &["/spec/replicas"], false),
            line("audit", "drift", "carol", &["/spec/replicas"], true),
            line(
                "warn",
                "scale-parent-unknown",
                "dave",
                &["/spec/replicas"],
                false,
            ),
            line("allow", "no-drift", "erin", &[], false),
            "not json".into(),
        ]
        .join("\n");
        let report = Report::read(log.as_bytes()).unwrap();
        assert_eq!(
            (report.decisions, report.would_deny, report.other_lines),
            (6, 3, 1)
        );
        let text = report.render(10);
        assert!(
            text.contains("3 writes allowed only by audit or warn mode"),
            "{text}"
        );
        assert!(text.contains("     2  alice"), "{text}");
        assert!(text.contains("Top namespaces:\n       3  shop\n"), "{text}");
        assert!(text.contains("     3  apps/Deployment shop/web"), "{text}");
        let rule = "  # 3 writes\n  - {group: \"apps\", kind: Deployment, jsonPointers: [\"/spec/replicas\"]}";
        assert!(text.contains(rule), "{text}");
        // A path seen once is not suggested.
        assert!(!text.contains("/metadata/labels/x\"]"), "{text}");
        // The suggestion loads as policy.
        let start = text.find("ignoreDifferences:").unwrap();
        let yaml = &text[start..text.find("\n(").unwrap()];
        crate::policy::Policy::from_yaml(yaml, "suggested").unwrap();
    }
}
