//! Rules the binary and the chart or docs share are written once, in the
//! binary: these tests fail when a copy drifts from it.

use driftguard::drift::excluded::{EXCLUDED_GROUPS, EXCLUDED_RESOURCES};
use driftguard::policy::DEFAULT_POLICY_YAML;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap()
}

fn chart_values() -> Value {
    yaml(&std::fs::read_to_string(format!("{ROOT}/charts/driftguard/values.yaml")).unwrap())
}

#[test]
fn the_charts_policy_is_the_embedded_default() {
    assert_eq!(chart_values()["policy"], yaml(DEFAULT_POLICY_YAML));
}

#[test]
fn the_charts_excluded_kinds_are_the_binarys() {
    let webhook = &chart_values()["webhook"];
    assert_eq!(
        webhook["excludedGroups"],
        serde_json::json!(EXCLUDED_GROUPS)
    );
    assert_eq!(
        webhook["excludedResources"],
        serde_json::json!(EXCLUDED_RESOURCES)
    );
}

/// Each row of docs/policy.md's table names one key and its default as
/// YAML; together the rows name every key of the embedded default policy.
#[test]
fn the_docs_table_is_the_embedded_default() {
    let docs = std::fs::read_to_string(format!("{ROOT}/docs/policy.md")).unwrap();
    let defaults = yaml(DEFAULT_POLICY_YAML);
    let mut documented = Vec::new();
    for row in docs.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let key = cells[0].trim_start_matches("| ").trim_matches('`');
        let written = yaml(cells[1].trim_matches('`'));
        let pointer = format!("/{}", key.replace('.', "/"));
        let expected = if key == "ignoreDifferences" {
            // A file of one's own starts with none (the embedded policy adds one).
            serde_json::json!([])
        } else {
            defaults.pointer(&pointer).cloned().unwrap_or(Value::Null)
        };
        assert_eq!(written, expected, "docs/policy.md's default for {key}");
        documented.push(pointer);
    }
    let mut leaves = Vec::new();
    leaf_pointers(&defaults, String::new(), &mut leaves);
    for leaf in leaves {
        assert!(
            documented.contains(&leaf),
            "docs/policy.md has no row for {leaf}"
        );
    }
}

/// The pointers of `value`'s leaves, lists counted as leaves.
fn leaf_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                leaf_pointers(v, format!("{at}/{k}"), out);
            }
        }
        _ => out.push(at),
    }
}

/// Every `serve` flag is in docs/cli.md's reference.
#[test]
fn every_serve_flag_is_documented() {
    use clap::CommandFactory;
    let docs = std::fs::read_to_string(format!("{ROOT}/docs/cli.md")).unwrap();
    let cli = driftguard::cli::Cli::command();
    let serve = cli.find_subcommand("serve").expect("a serve command");
    let missing: Vec<String> = serve
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| *long != "help")
        .map(|long| format!("--{long}"))
        .filter(|flag| !docs.contains(flag.as_str()))
        .collect();
    assert!(missing.is_empty(), "docs/cli.md lacks {missing:?}");
}

/// Every metric driftguard exports is named in docs/cli.md's metrics list.
/// Every metric family the server exports: the registered ones (a labelled
/// family shows no TYPE line before its first sample) and the process-wide ones.
fn metric_families() -> Vec<String> {
    use driftguard::metrics::Metrics;
    let exported = Metrics::default().encode();
    let mut names: Vec<String> = Metrics::NAMES.iter().map(|n| n.to_string()).collect();
    names.extend(
        exported
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned),
    );
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_metric_is_documented() {
    let docs = std::fs::read_to_string(format!("{ROOT}/docs/cli.md")).unwrap();
    let missing: Vec<String> = metric_families()
        .into_iter()
        .filter(|name| !docs.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "docs/cli.md names no {missing:?}");
}

/// The alerts and the dashboard query only metrics the server exports.
#[test]
fn the_charts_alerts_and_dashboard_read_metrics_that_exist() {
    let families = metric_families();
    let monitoring = std::fs::read_to_string(format!(
        "{ROOT}/charts/driftguard/templates/monitoring.yaml"
    ))
    .unwrap();
    let mut queried = 0;
    for (at, _) in monitoring.match_indices("driftguard_") {
        let name: String = monitoring[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let known = families.iter().any(|family| {
            ["", "_total", "_bucket", "_sum", "_count", "_info"]
                .iter()
                .any(|suffix| name == format!("{family}{suffix}"))
        });
        assert!(
            known,
            "monitoring.yaml queries {name}, which driftguard does not export"
        );
        queried += 1;
    }
    assert!(queried >= 10, "only {queried} metric names found");
}

/// The chart's certificate alerts read the expiry gauge, and the expiring one
/// fires at the very threshold the server warns at: one number, two copies.
#[test]
fn the_certificate_alerts_use_the_servers_threshold() {
    use driftguard::certs::expiry::WARN_WITHIN_SECONDS;
    let monitoring = std::fs::read_to_string(format!(
        "{ROOT}/charts/driftguard/templates/monitoring.yaml"
    ))
    .unwrap();
    let rule = |alert: &str| {
        let at = monitoring
            .find(&format!("- alert: {alert}\n"))
            .unwrap_or_else(|| panic!("no alert {alert} in monitoring.yaml"));
        let expr = monitoring[at..].lines().nth(1).unwrap_or_default();
        expr.trim()
            .strip_prefix("expr: ")
            .unwrap_or_default()
            .to_owned()
    };
    let gauge = "min by (certificate) (driftguard_certificate_expiry_timestamp_seconds) - time()";
    let days = WARN_WITHIN_SECONDS / 86_400;
    assert_eq!(
        rule("DriftguardCertificateExpiringSoon"),
        format!("{gauge} < {days} * 86400 > 0")
    );
    assert_eq!(
        rule("DriftguardCertificateExpired"),
        format!("{gauge} <= 0")
    );
}

/// Every YAML block in the docs that is a policy (its keys are policy keys),
/// or the chart's `policy:` value, loads as policy.
#[test]
fn every_policy_example_in_the_docs_loads() {
    const KEYS: &[&str] = &[
        "mode",
        "namespaces",
        "controllers",
        "trusted",
        "breakGlass",
        "gitops",
        "unknownScaleParent",
        "ignoreDifferences",
        "precision",
        "plannedCreates",
    ];
    let mut files = vec![format!("{ROOT}/README.md")];
    for entry in std::fs::read_dir(format!("{ROOT}/docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path.display().to_string());
        }
    }
    let mut loaded = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            let Ok(Value::Object(map)) = serde_saphyr::from_str::<Value>(block) else {
                continue;
            };
            let policy = match map.get("policy") {
                Some(policy) if map.len() == 1 => serde_json::to_string(policy).unwrap(),
                _ if map.keys().all(|k| KEYS.contains(&k.as_str())) => block.to_owned(),
                _ => continue,
            };
            if let Err(e) = driftguard::Policy::from_yaml(&policy, &file) {
                panic!("{file}: a policy example does not load: {e}\n{block}");
            }
            loaded.push(file.clone());
        }
    }
    // The policy reference's and the adoption path's examples among them.
    for page in ["docs/policy.md", "docs/adopt.md"] {
        assert!(
            loaded.iter().any(|f| f.ends_with(page)),
            "no policy example found in {page}: {loaded:?}"
        );
    }
}

/// The README's first command is `cargo run`, which needs to know which of
/// the two binaries is the server.
#[test]
fn the_readmes_first_command_runs_the_server() {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let first = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().next())
        .unwrap();
    assert!(first.starts_with("cargo run --release -- serve"), "{first}");
    let manifest = std::fs::read_to_string(format!("{ROOT}/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("\ndefault-run = \"driftguard\"\n"),
        "Cargo.toml sets no default-run"
    );
}

/// The chart README's values reference, generated from values.yaml: every key
/// in file order with its default and the comments above and beside it, a
/// section per top-level map. The policy is one row (docs/policy.md is its
/// reference).
fn values_reference(text: &str) -> String {
    let values = yaml(text);
    let mut top = String::from("\n### Top level\n\n| value | default | |\n|---|---|---|\n");
    let mut sections = String::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut list_indent: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        if body.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(c) = body.strip_prefix('#') {
            comment.push(c.trim().to_owned());
            continue;
        }
        if body.starts_with("- ") {
            list_indent = Some(indent);
            continue;
        }
        if list_indent.is_some_and(|l| indent > l) {
            continue;
        }
        list_indent = None;
        let Some((key, rest)) = body.split_once(':') else {
            continue;
        };
        stack.retain(|(i, _)| *i < indent);
        stack.push((indent, key.to_owned()));
        let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        let beside = rest.split_once(" #").map(|(_, c)| c.trim().to_owned());
        let about = comment
            .drain(..)
            .chain(beside)
            .collect::<Vec<_>>()
            .join(" ");
        let value = path.iter().fold(&values, |v, k| &v[*k]);
        let section = path.len() == 1 && value.as_object().is_some_and(|m| !m.is_empty());
        if section && key != "policy" {
            sections.push_str(&format!("\n### `{key}`\n\n"));
            if !about.is_empty() {
                sections.push_str(&format!("{about}\n\n"));
            }
            sections.push_str("| value | default | |\n|---|---|---|\n");
            continue;
        }
        if path[0] == "policy" && path.len() > 1 {
            continue;
        }
        let default = match value {
            _ if key == "policy" => {
                "the embedded default policy (src/policy/default-policy.yaml)".to_owned()
            }
            Value::Object(m)
                if !m.is_empty() && rest.split(" #").next().unwrap().trim().is_empty() =>
            {
                String::new()
            }
            v => format!("`{v}`"),
        };
        let row = format!(
            "| `{}` | {default} | {} |\n",
            path.join("."),
            about.replace('|', "\\|")
        );
        if path.len() == 1 {
            &mut top
        } else {
            &mut sections
        }
        .push_str(&row);
    }
    top + &sections
}

/// `DRIFTGUARD_BLESS=1 cargo test --test one_source` rewrites it.
#[test]
fn the_chart_readme_is_generated_from_the_values_comments() {
    const BEGIN: &str = "<!-- values: generated from values.yaml by tests/one_source.rs; DRIFTGUARD_BLESS=1 cargo test --test one_source -->\n";
    const END: &str = "<!-- values: end -->\n";
    let dir = format!("{ROOT}/charts/driftguard");
    let values = std::fs::read_to_string(format!("{dir}/values.yaml")).unwrap();
    let readme_path = format!("{dir}/README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (head, rest) = readme
        .split_once(BEGIN)
        .expect("the README has the BEGIN marker");
    let (_, tail) = rest.split_once(END).expect("the README has the END marker");
    let fresh = format!("{head}{BEGIN}{}{END}{tail}", values_reference(&values));
    if std::env::var_os("DRIFTGUARD_BLESS").is_some() {
        std::fs::write(&readme_path, &fresh).unwrap();
    } else {
        assert!(
            readme == fresh,
            "charts/driftguard/README.md is stale: DRIFTGUARD_BLESS=1 cargo test --test one_source"
        );
    }
    // Every key of values.yaml is in it: a leaf as a row, a map as its
    // section's rows, a flow map as a row's default.
    fn rows(prefix: &str, v: &Value, readme: &str) {
        for (k, v) in v.as_object().into_iter().flatten() {
            let path = format!("{prefix}{k}");
            let row = format!("| `{path}` | ");
            match v {
                Value::Object(m)
                    if !m.is_empty()
                        && path != "policy"
                        && !readme.contains(&format!("{row}`")) =>
                {
                    rows(&format!("{path}."), v, readme)
                }
                _ => assert!(readme.contains(&row), "{path} is not in the chart README"),
            }
        }
    }
    rows("", &yaml(&values), &fresh);
}

/// The chart's schema for `policy` is the policy's own (issue 48: a typo in
/// `policy.gitops` rendered, and the pods then refused the policy). Refresh it
/// with `driftguard policy schema` when the policy's schema changes:
/// `jq --argjson p "$(driftguard policy schema)" '.properties.policy = $p'`.
#[test]
fn the_charts_policy_schema_is_generated_from_the_policys() {
    let chart: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/charts/driftguard/values.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        chart["properties"]["policy"],
        driftguard::policy::json_schema(),
        "charts/driftguard/values.schema.json's properties.policy is not `driftguard policy schema`"
    );
}
