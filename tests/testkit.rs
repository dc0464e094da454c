//! The testkit's own helpers, checked without a control plane: where it finds
//! the repository and driftguard's binaries (which every end-to-end test
//! needs), and the generative oracle's edits (`generate`, used by e2e_oracle).

use driftguard_testkit::generate::*;
use driftguard_testkit::process::{ROOT, cargo_bin};
use serde_json::json;

#[test]
fn root_is_the_repository() {
    let manifest = std::fs::read_to_string(format!("{ROOT}/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"driftguard\""), "{ROOT}");
    assert_eq!(ROOT, env!("CARGO_MANIFEST_DIR"));
    assert!(
        std::path::Path::new(ROOT)
            .join("scripts/build-tools.sh")
            .is_file()
    );
}

#[test]
fn the_binaries_are_found_beside_the_test() {
    for (name, built) in [
        ("driftguard", env!("CARGO_BIN_EXE_driftguard")),
        (
            "kubectl-driftguard",
            env!("CARGO_BIN_EXE_kubectl-driftguard"),
        ),
    ] {
        let found = cargo_bin(name).unwrap_or_else(|| panic!("{name} not found"));
        assert_eq!(
            found.canonicalize().unwrap(),
            std::path::Path::new(built).canonicalize().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn base64_matches_the_manifests() {
    assert_eq!(base64(b"s3cret"), "czNjcmV0");
    assert_eq!(base64(b"shop"), "c2hvcA==");
    assert_eq!(base64(b"ab"), "YWI=");
}

#[test]
fn ops_apply_as_json_patch_does() {
    let mut v = json!({"a": {"b": [1, 2]}, "m": {"x": "1"}});
    assert!(apply_op(&mut v, &Op::Add("/a/b/-".into(), json!(3))));
    assert!(apply_op(&mut v, &Op::Remove("/a/b/0".into())));
    assert!(apply_op(&mut v, &Op::Set("/m/x".into(), json!("2"))));
    assert!(!apply_op(&mut v, &Op::Set("/m/y".into(), json!("2"))));
    assert_eq!(v, json!({"a": {"b": [2, 3]}, "m": {"x": "2"}}));
}

#[test]
fn a_keyed_entry_moved_by_an_insert_is_no_change_by_key() {
    let before = json!({"spec": {"ports": [{"containerPort": 8080, "protocol": "TCP"}]}});
    let after = json!({"spec": {"ports": [{"containerPort": 9, "protocol": "TCP"},
                                          {"containerPort": 8080, "protocol": "TCP"}]}});
    assert_eq!(edited_paths_by_key(&before, &after), vec!["/spec/ports/1"]);
    assert_eq!(edited_paths(&before, &after).len(), 2, "by position: two");
}

#[test]
fn merge_patch_nulls_removed_keys() {
    let p = merge_patch(
        &json!({"a": 1, "b": {"c": 1, "d": 2}}),
        &json!({"b": {"c": 1, "d": 3}}),
    );
    assert_eq!(p, json!({"a": null, "b": {"d": 3}}));
}
