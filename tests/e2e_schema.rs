//! `src/drift/atomic_maps.json`, which tells `precision: ownedFields` a map
//! the GitOps tool owns whole (atomic: a LabelSelector) from one it applied
//! empty and owns only the presence of (Flux applies a StatefulSet's
//! `updateStrategy: {}`), is what the real kube-apiserver's OpenAPI says, on
//! every supported Kubernetes version (scripts/test.sh runs this test on
//! each). `DRIFTGUARD_WRITE_ATOMIC_MAPS=1` writes the file instead.

use driftguard_testkit::atomic_maps;
use driftguard_testkit::control_plane;

use control_plane::*;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const TABLE: &str = "src/drift/atomic_maps.json";

fn get(plane: &ControlPlane, path: &str) -> Value {
    let out = plane.kubectl("admin", &["get", "--raw", path]);
    assert!(out.ok, "GET {path}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[test]
fn the_atomic_maps_table_is_what_the_apiserver_says() {
    let plane = ControlPlane::start("schema");
    let index = get(&plane, "/openapi/v3");
    let documents: Vec<Value> = index["paths"]
        .as_object()
        .expect("the OpenAPI v3 index lists group-versions")
        .values()
        .filter_map(|p| p["serverRelativeURL"].as_str())
        .map(|url| get(&plane, url))
        .collect();
    let live = atomic_maps::atomic_maps(&documents);
    // Enough of the table to know the walk read the documents at all.
    for (kind, path) in [
        ("apps/v1/StatefulSet", "/spec/selector"),
        (
            "apps/v1/Deployment",
            "/spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/*/labelSelector",
        ),
        ("networking.k8s.io/v1/NetworkPolicy", "/spec/podSelector"),
        ("v1/Service", "/spec/selector"),
    ] {
        assert!(
            live.get(kind).is_some_and(|p| p.contains(path)),
            "{kind} {path}"
        );
    }
    assert!(!live["apps/v1/StatefulSet"].contains("/spec/updateStrategy"));
    let path = format!("{ROOT}/{TABLE}");
    let text = serde_json::to_string_pretty(&live).unwrap() + "\n";
    if std::env::var_os("DRIFTGUARD_WRITE_ATOMIC_MAPS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed: BTreeMap<String, BTreeSet<String>> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // The table is the newest version's; an older one may lack kinds and
    // fields, never call atomic what the table does not.
    let newest = std::env::var_os("DRIFTGUARD_KUBE_VERSION").is_none();
    let mut differ: Vec<String> = live
        .iter()
        .filter(|(kind, paths)| match committed.get(*kind) {
            Some(table) if newest => table != *paths,
            Some(table) => !paths.is_subset(table),
            None => true,
        })
        .map(|(kind, _)| kind.clone())
        .collect();
    if newest {
        differ.extend(committed.keys().filter(|k| !live.contains_key(*k)).cloned());
    }
    assert!(
        differ.is_empty(),
        "{TABLE} differs from the apiserver's OpenAPI for {differ:?}: \
         DRIFTGUARD_WRITE_ATOMIC_MAPS=1 cargo test --test e2e_schema writes it"
    );
}
