//! `driftguard report`: reads the audit records of a trial in audit or warn
//! mode and says what enforcing would have denied, by object, user and path,
//! with the ignore rules that would let the frequent paths through: the step
//! between installing in audit mode and turning enforce on.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::text::printable;
use std::fmt::Write as _;
use std::io::BufRead;

use serde::Deserialize;

/// Distinct objects, users or paths counted per table. Past it, the least
/// counted key gives way to a new one (Space-Saving), so keys that came early
/// cannot keep a later frequent one out.
const DISTINCT: usize = 20_000;

/// Bytes of a key kept (a drifted path can be any map key): with
/// [`DISTINCT`], a table holds at most about 20 MiB.
const MAX_KEY: usize = 512;

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

/// Counts by key, at most [`DISTINCT`] keys (Space-Saving: a new key past
/// it takes the place, and the count plus one, of the least counted, so a
/// count is high by at most the `replaced` minimum it inherited).
#[derive(Default)]
struct Tally {
    counts: HashMap<String, u64>,
    by_count: BTreeSet<(u64, String)>,
    /// Keys replaced, and the largest count a newcomer inherited.
    replaced: u64,
    inherited: u64,
}

impl Tally {
    fn add(&mut self, mut key: String) {
        if key.len() > MAX_KEY {
            let cut = (0..=MAX_KEY).rev().find(|i| key.is_char_boundary(*i));
            key.truncate(cut.unwrap_or(0));
            key.push('…');
        }
        let count = match self.counts.get(&key) {
            Some(&n) => {
                self.by_count.remove(&(n, key.clone()));
                n + 1
            }
            None if self.counts.len() < DISTINCT => 1,
            None => {
                let Some((least, gone)) = self.by_count.pop_first() else {
                    return;
                };
                self.counts.remove(&gone);
                self.replaced += 1;
                self.inherited = self.inherited.max(least);
                least + 1
            }
        };
        self.counts.insert(key.clone(), count);
        self.by_count.insert((count, key));
    }

    /// The `n` largest, largest first, ties by key.
    fn top(&self, n: usize) -> Vec<(&str, u64)> {
        let mut all: Vec<_> = self.counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
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
    /// `["group", "Kind", "path"]` (JSON) of the would-be denials.
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
            let key = serde_json::to_string(&(&r.group, &r.kind, &path)).unwrap_or_default();
            self.paths.add(key);
        }
    }

    /// The report as text, `top` rows per table.
    pub(crate) fn render(&self, top: usize) -> String {
        let mut out = String::new();
        let verdicts: Vec<String> = self
            .by_verdict
            .iter()
            .map(|(v, n)| format!("{} {n}", printable(v)))
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
            // Recorded fields are anyone's to write (a drifted map key):
            // escaped, so none can forge a line or move the cursor.
            for (key, n) in tally.top(top) {
                let _ = writeln!(out, "  {n:>6}  {}", printable(key));
            }
            if tally.replaced > 0 {
                let _ = writeln!(
                    out,
                    "  ({} rarer keys gave way past {DISTINCT}; a count above may include up to {} of theirs)",
                    tally.replaced, tally.inherited
                );
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
            // JSON strings are YAML flow scalars: a recorded path or kind
            // cannot close its quotes and write another rule.
            let Ok((group, kind, path)) = serde_json::from_str::<(String, String, String)>(key)
            else {
                continue;
            };
            let scalar = |s: &str| {
                let json = serde_json::to_string(s).unwrap_or_default();
                crate::text::printable_json(&json).into_owned()
            };
            let _ = writeln!(
                out,
                "  # {n} writes\n  - {{group: {}, kind: {}, jsonPointers: [{}]}}",
                scalar(&group),
                scalar(&kind),
                scalar(&path)
            );
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
        let rule = "  # 3 writes\n  - {group: \"apps\", kind: \"Deployment\", jsonPointers: [\"/spec/replicas\"]}";
        assert!(text.contains(rule), "{text}");
        // A path seen once is not suggested.
        assert!(!text.contains("/metadata/labels/x\"]"), "{text}");
        // The suggestion loads as policy.
        let start = text.find("ignoreDifferences:").unwrap();
        let yaml = &text[start..text.find("\n(").unwrap()];
        crate::policy::Policy::from_yaml(yaml, "suggested").unwrap();
    }

    /// A drifted path is any map key a writer chose: whatever it holds, the
    /// report's lines stay its own and each suggested rule ignores exactly
    /// that path of that kind.
    #[test]
    fn a_recorded_path_cannot_forge_a_rule_or_a_line() {
        let forged = [
            "/spec/values/x\"]}\n  - {group: apps, kind: Deployment, jsonPointers: [\"/spec",
            "/spec/values/x\", \"/spec",
            "/spec/\u{1b}[2J\u{1b}[1;1H\r\u{202e}",
        ];
        let log: Vec<String> = forged
            .iter()
            .flat_map(|p| {
                let rec = serde_json::json!({"verdict": "audit", "reason": "drift", "user": "mallory\nx",
                    "group": "example.io", "kind": "Widget", "namespace": "t", "name": "w",
                    "driftedPaths": [p]});
                [rec.to_string(), rec.to_string()]
            })
            .collect();
        let text = Report::read(log.join("\n").as_bytes()).unwrap().render(10);
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
        let start = text.find("ignoreDifferences:").unwrap();
        let yaml = &text[start..];
        let value: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        let rules = value["ignoreDifferences"].as_array().unwrap();
        assert_eq!(rules.len(), forged.len(), "{yaml}");
        for rule in rules {
            assert_eq!(rule["kind"], "Widget");
            assert_eq!(rule["jsonPointers"].as_array().unwrap().len(), 1);
            assert!(
                forged.contains(&rule["jsonPointers"][0].as_str().unwrap()),
                "{rule}"
            );
        }
    }

    /// Past the table's size, a path drifted often after thousands of
    /// one-off keys is still counted and suggested.
    #[test]
    fn early_keys_cannot_keep_a_later_frequent_one_out() {
        let mut tally = Tally::default();
        for i in 0..DISTINCT + 500 {
            tally.add(format!("junk-{i}"));
        }
        for _ in 0..50 {
            tally.add("/spec/replicas".into());
        }
        tally.add("x".repeat(10 * MAX_KEY));
        assert_eq!(tally.top(1)[0].0, "/spec/replicas");
        assert!(tally.counts.len() <= DISTINCT);
        assert!(
            tally
                .counts
                .keys()
                .all(|k| k.len() <= MAX_KEY + '…'.len_utf8())
        );
    }
}
