//! Every label and annotation key the GitOps tools name in their code is
//! judged (issue 49, item 2): read from the Go sources of the tools at the
//! versions `scripts/build-tools.sh` builds (Argo CD with its gitops-engine,
//! kustomize-controller with fluxcd/pkg's ssa and meta, Helm), from the Go
//! module cache the build fills. Each key found must be a decision input
//! (under a tool's key space, `drift::key_spaces`) or reviewed there with its
//! source; a reviewed key the tools no longer name fails too. A tool upgrade
//! thus fails this test until its new keys are judged. helm-controller is not
//! built yet (issue 52): its keys are not read here.
//!
//! Keys are found as string literals under the tools' domains, and as
//! `fmt.Sprintf("%s/<name>", <api>.GroupVersion.Group)`, Flux's way of
//! naming its own (the group read from the API package's
//! `groupversion_info.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use driftguard::drift::key_spaces::{self, Reviewed};
use driftguard_testkit::control_plane::ROOT;

/// The tools' domains: any key under one is looked at.
const DOMAINS: [&str; 3] = ["argoproj.io", "fluxcd.io", "helm.sh"];
/// Directories that are not the tools' running code.
const SKIPPED: [&str; 8] = [
    "test", "tests", "testdata", "hack", "docs", "e2e", "agent", "examples",
];

fn mod_cache() -> PathBuf {
    let from_go = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty());
    let home = std::env::var("HOME").unwrap_or_default();
    PathBuf::from(from_go.unwrap_or(format!("{home}/go/pkg/mod")))
}

/// `NAME="value"` from scripts/build-tools.sh.
fn built_version(name: &str) -> String {
    let script = std::fs::read_to_string(format!("{ROOT}/scripts/build-tools.sh")).unwrap();
    let line = (script.lines())
        .find_map(|l| l.trim().strip_prefix(&format!("{name}=\"")))
        .unwrap_or_else(|| panic!("{name} in scripts/build-tools.sh"));
    line.trim_end_matches('"').to_owned()
}

/// The version `go.mod` at `dir` requires of `module`.
fn required(dir: &Path, module: &str) -> String {
    let text = std::fs::read_to_string(dir.join("go.mod")).unwrap();
    (text.lines())
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(module)).then(|| words.next().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| panic!("{}: no require of {module}", dir.display()))
}

/// Every `.go` file under `dir` but tests and the skipped directories.
fn go_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !SKIPPED.contains(&name.as_str()) {
            go_files(&path, out);
        } else if name.ends_with(".go") && !name.ends_with("_test.go") {
            out.push(path);
        }
    }
}

/// Whether `key` (`domain/name`) is under one of the tools' domains.
fn tool_key(key: &str) -> bool {
    let Some((domain, name)) = key.split_once('/') else {
        return false;
    };
    !name.is_empty()
        && DOMAINS
            .iter()
            .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

/// The string literals of `source` that read as keys under the tools' domains.
fn literal_keys(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in source.split('"').skip(1).step_by(2) {
        let ok = piece
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "./-_".contains(c));
        // A key is `prefix/name`, one slash: not an import path.
        if ok && piece.matches('/').count() == 1 && tool_key(piece) {
            out.push(piece.to_owned());
        }
    }
    out
}

/// `fmt.Sprintf("%s/<name>", <alias>.GroupVersion.Group)` in `source`,
/// resolved through its imports to `group/<name>`.
fn group_keys(source: &str, cache: &Path, modules: &BTreeMap<String, PathBuf>) -> Vec<String> {
    let mut out = Vec::new();
    let marker = "fmt.Sprintf(\"%s/";
    for (at, _) in source.match_indices(marker) {
        let rest = &source[at + marker.len()..];
        let Some((name, rest)) = rest.split_once("\", ") else {
            continue;
        };
        let Some((alias, _)) = rest.split_once(".GroupVersion.Group)") else {
            continue;
        };
        let import = format!("{alias} \"");
        let Some(path) = source
            .split(&import)
            .nth(1)
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let Some((module, dir)) = modules
            .iter()
            .filter(|(m, _)| path.starts_with(m.as_str()))
            .max_by_key(|(m, _)| m.len())
        else {
            continue;
        };
        let info = dir
            .join(path[module.len()..].trim_start_matches('/'))
            .join("groupversion_info.go");
        let text = std::fs::read_to_string(&info)
            .unwrap_or_else(|_| panic!("{}: no {}", cache.display(), info.display()));
        if let Some(group) = text
            .split("Group: \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        {
            out.push(format!("{group}/{name}"));
        }
    }
    out
}

/// Every key the tools' sources name, with a file that names it.
fn tool_keys() -> BTreeMap<String, PathBuf> {
    let cache = mod_cache();
    let argocd = cache.join(format!(
        "github.com/argoproj/argo-cd/v3@{}",
        built_version("ARGOCD_VERSION")
    ));
    let kustomize = cache.join(format!(
        "github.com/fluxcd/kustomize-controller@{}",
        built_version("FLUX_VERSION")
    ));
    let helm = cache.join(format!("helm.sh/helm/v3@{}", built_version("HELM_VERSION")));
    for dir in [&argocd, &kustomize, &helm] {
        assert!(
            dir.is_dir(),
            "{} is not in the Go module cache: run scripts/build-tools.sh gitops helm (the tools are built from it)",
            dir.display()
        );
    }
    let engine = cache.join(format!(
        "github.com/argoproj/argo-cd/gitops-engine/v3@{}",
        required(&argocd, "github.com/argoproj/argo-cd/gitops-engine/v3")
    ));
    let module = |name: &str| cache.join(format!("{name}@{}", required(&kustomize, name)));
    let mut modules = BTreeMap::new();
    for name in [
        "github.com/fluxcd/kustomize-controller/api",
        "github.com/fluxcd/pkg/ssa",
        "github.com/fluxcd/pkg/apis/meta",
    ] {
        modules.insert(name.to_owned(), module(name));
    }
    let trees = [
        argocd.join("controller"),
        argocd.join("common"),
        argocd.join("pkg"),
        argocd.join("util"),
        argocd.join("applicationset"),
        engine.clone(),
        kustomize.join("internal"),
        modules["github.com/fluxcd/pkg/ssa"].clone(),
        modules["github.com/fluxcd/pkg/apis/meta"].clone(),
        helm.join("pkg"),
    ];
    let mut files = Vec::new();
    for tree in &trees {
        assert!(
            tree.is_dir(),
            "{} is not in the module cache",
            tree.display()
        );
        go_files(tree, &mut files);
    }
    let mut keys = BTreeMap::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_default();
        let found = literal_keys(&source)
            .into_iter()
            .chain(group_keys(&source, &cache, &modules));
        for key in found {
            keys.entry(key).or_insert_with(|| file.clone());
        }
    }
    keys
}

#[test]
fn every_key_the_tools_name_is_an_input_or_reviewed() {
    let keys = tool_keys();
    // The extraction works: keys named each way are found.
    for known in [
        "argocd.argoproj.io/hook",
        "argocd.argoproj.io/sync-options",
        "helm.sh/hook",
        "helm.sh/resource-policy",
        "kustomize.toolkit.fluxcd.io/ssa",
        "kustomize.toolkit.fluxcd.io/prune",
        "reconcile.fluxcd.io/requestedAt",
    ] {
        assert!(
            keys.contains_key(known),
            "{known} not found: {:?}",
            keys.keys()
        );
    }
    let unjudged: Vec<String> = (keys.iter())
        .filter(|(key, _)| !key_spaces::is_input(key) && key_spaces::reviewed(key).is_none())
        .map(|(key, file)| format!("{key} ({})", file.display()))
        .collect();
    assert!(
        unjudged.is_empty(),
        "keys the tools name that driftguard treats as neither an input nor reviewed (drift/key_spaces.rs):\n{}",
        unjudged.join("\n")
    );
    // A reviewed tool key the tools no longer name is a stale review.
    let found: BTreeSet<&str> = keys.keys().map(String::as_str).collect();
    let stale: Vec<&str> = (key_spaces::REVIEWED.iter())
        .filter(|(_, why)| matches!(why, Reviewed::Inert(_) | Reviewed::NotAKey(_)))
        .map(|(key, _)| *key)
        .filter(|key| !found.contains(key))
        .collect();
    assert!(
        stale.is_empty(),
        "reviewed keys the tools no longer name: {stale:?}"
    );
    // What the key spaces add to the inputs the decision names.
    let policy = driftguard::policy::Policy::embedded();
    let named: BTreeSet<String> = (driftguard::drift::inputs::locations(&policy).into_iter())
        .map(|(_, at)| at.pointer())
        .collect();
    let beyond: Vec<&String> = (keys.keys())
        .filter(|k| key_spaces::is_input(k))
        .filter(|k| {
            let escaped = k.replace('~', "~0").replace('/', "~1");
            !["labels", "annotations"]
                .iter()
                .any(|s| named.contains(&format!("/metadata/{s}/{escaped}")))
        })
        .collect();
    eprintln!("inputs by key space beyond the named ones: {beyond:?}");
    eprintln!(
        "{} keys the tools name: {} inputs, {} reviewed",
        keys.len(),
        keys.keys().filter(|k| key_spaces::is_input(k)).count(),
        keys.keys()
            .filter(|k| key_spaces::reviewed(k).is_some())
            .count()
    );
}
