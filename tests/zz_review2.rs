mod common;
use common::*;
use driftguard::Policy;
use driftguard::drift::{ArgoCdSources, Manager, Verdict};
use driftguard::sources::{FluxKind, Sources, flux_from_value};
use serde_json::json;
use std::sync::Arc;

const IMAGE: &str = "/spec/template/spec/containers/0/image";

fn cm_labelled() -> serde_json::Value {
    let d = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    with(&d, "/metadata/labels/team.io~1app", json!("shop"))
}
fn argo_label_sources() -> Sources {
    Sources::of_argocd(ArgoCdSources {
        instance_label: Some("team.io/app".into()),
        ..Default::default()
    })
}

#[test]
fn r1_argocd_cm_instance_label_is_not_an_input() {
    let stored = cm_labelled();
    let unlabelled = without(&stored, "/metadata/labels/team.io~1app");
    let probe = |p: &Policy, s: &serde_json::Value| {
        decided_with(
            p,
            &Review::update(s.clone(), with(s, IMAGE, json!("web:2"))),
            &argo_label_sources(),
        )
    };
    // (a) ignore rule on labels, enforce
    let p = Policy::from_yaml(
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels]}\n",
        "p.yaml",
    )
    .unwrap();
    let before = probe(&p, &stored);
    let w1 = decided_with(
        &p,
        &Review::update(stored.clone(), unlabelled.clone()),
        &argo_label_sources(),
    );
    let after = probe(&p, &unlabelled);
    eprintln!(
        "R1a before={:?} w1={:?}/{:?} after={:?}/{:?}",
        before.verdict, w1.verdict, w1.finding, after.verdict, after.finding
    );
    // (b) warn mode, no rules
    let p = Policy::from_yaml("mode: warn\n", "p.yaml").unwrap();
    let before = probe(&p, &stored);
    let w1 = decided_with(
        &p,
        &Review::update(stored.clone(), unlabelled.clone()),
        &argo_label_sources(),
    );
    let after = probe(&p, &unlabelled);
    eprintln!(
        "R1b before={:?} w1={:?}/{:?} inputs={:?} after={:?}/{:?}",
        before.verdict, w1.verdict, w1.finding, w1.inputs_changed, after.verdict, after.finding
    );
    // (c) break-glass enforce, no rules
    let p = Policy::from_yaml(
        "breakGlass: {allowedGroups: [sre], maxDuration: 4h}\n",
        "p.yaml",
    )
    .unwrap();
    let mut armed = with(
        &unlabelled,
        "/metadata/annotations/driftguard.io~1break-glass",
        json!("INC-1"),
    );
    armed = with(
        &armed,
        "/metadata/annotations/driftguard.io~1break-glass-expires",
        json!("2026-11-29T11:00:00Z"),
    );
    let before = probe(&p, &stored);
    let w1 = decided_with(
        &p,
        &Review::update(stored.clone(), armed.clone()).by("bob", &["sre"]),
        &argo_label_sources(),
    );
    let after = probe(&p, &armed);
    eprintln!(
        "R1c before={:?} w1={:?}/{:?} after={:?}/{:?}",
        before.verdict, w1.verdict, w1.finding, after.verdict, after.finding
    );
    // (d) retarget label to another app
    let p = Policy::from_yaml(
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels]}\n",
        "p.yaml",
    )
    .unwrap();
    let moved = with(&stored, "/metadata/labels/team.io~1app", json!("other"));
    let w1 = decided_with(
        &p,
        &Review::update(stored.clone(), moved.clone()),
        &argo_label_sources(),
    );
    eprintln!(
        "R1d w1={:?}/{:?} manager={:?}",
        w1.verdict, w1.finding, w1.manager
    );
}

#[test]
fn r2_a_tenants_inventory_blocks_and_lends() {
    let k = |ns: &str, sa: &str| {
        let v = json!({"metadata": {"name": "apps", "namespace": ns}, "spec": {"serviceAccountName": sa}});
        Arc::new(flux_from_value(FluxKind::Kustomization, &v).unwrap())
    };
    let tenant = Manager::FluxKustomization {
        namespace: "team-a".into(),
        name: "apps".into(),
    };
    let mut planned = std::collections::HashMap::new();
    planned.insert("apps/Deployment:production/db".to_owned(), tenant);
    let sources = Sources {
        flux: vec![k("team-a", "tenant"), k("production", "deployer")],
        planned: Arc::new(planned),
        ..Default::default()
    };
    let mut db = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    db["metadata"]["name"] = json!("db");
    db["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "production"});
    let p = Policy::embedded();
    let own = decided_with(
        &p,
        &Review::create(db.clone()).by(
            "system:serviceaccount:production:deployer",
            &["system:serviceaccounts"],
        ),
        &sources,
    );
    eprintln!(
        "R2 team-b's own Flux account creating its object: {:?}/{:?} mgr={:?}",
        own.verdict, own.finding, own.manager
    );
    let mut evil = db.clone();
    evil["metadata"]["annotations"] = json!({"driftguard.io/mode": "audit"});
    let lent = decided_with(
        &p,
        &Review::create(evil).by(
            "system:serviceaccount:team-a:tenant",
            &["system:serviceaccounts"],
        ),
        &sources,
    );
    eprintln!(
        "R2 tenant's account creating team-b's object with mode audit: {:?}/{:?}",
        lent.verdict, lent.finding
    );
    let without_listing = Sources {
        flux: sources.flux.clone(),
        ..Default::default()
    };
    let base = decided_with(
        &p,
        &Review::create(db.clone()).by(
            "system:serviceaccount:production:deployer",
            &["system:serviceaccounts"],
        ),
        &without_listing,
    );
    eprintln!(
        "R2 baseline (not listed): {:?}/{:?}",
        base.verdict, base.finding
    );
    // unmanaged object of team B, also blocked
    let mut plain = db.clone();
    plain["metadata"]["labels"] = json!({});
    let alice = decided_with(&p, &Review::create(plain.clone()), &sources);
    let alice0 = decided_with(&p, &Review::create(plain), &without_listing);
    eprintln!(
        "R2 alice creating an unmanaged team-b object: listed {:?}/{:?}, not listed {:?}/{:?}",
        alice.verdict, alice.finding, alice0.verdict, alice0.finding
    );
    let _ = Verdict::Allow;
}
