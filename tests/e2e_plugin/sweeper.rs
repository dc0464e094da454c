//! The expiry sweeper: expired break-glasses end by themselves, pauses left
//! behind are lifted, and what driftguard never armed is left alone.

use super::*;

use std::time::Duration;

/// The sweeper: break-glasses armed for a few seconds on a Flux and an Argo
/// CD object end by themselves, the pause with them; the webhook allowed
/// driftguard's own write as `break-glass-ended`.
#[test]
fn the_sweeper_ends_expired_break_glass() {
    run(|e| {
        let before = e.metric("driftguard_break_glass_expired_total");
        let arm = |target: &str| {
            e.plugin(
                "sam",
                &[
                    "break-glass",
                    target,
                    "-n",
                    "production",
                    "--reason",
                    "INC-51 short",
                    "--for",
                    "6s",
                ],
            )
        };
        let out = arm("cm/argo-hotfix");
        ensure!(out.code == 0, "arming configmap/argo-hotfix for 6s: {out}");
        let app = e.application();
        ensure!(
            app["driftguard.io/break-glass-paused-for"] == "/ConfigMap:production/argo-hotfix"
                && app["argocd.argoproj.io/skip-reconcile"] == "true",
            "the Application is not paused for configmap/argo-hotfix: {app}"
        );
        let out = arm("cm/flux-hotfix");
        ensure!(out.code == 0, "arming configmap/flux-hotfix for 6s: {out}");
        // The webhook recorded both before it allowed the arming.
        let recorded = e.records();
        ensure!(
            ["argo-hotfix", "flux-hotfix"]
                .iter()
                .all(|n| recorded.contains(&format!("production/{n}"))),
            "the armed objects are not recorded: {recorded:?}"
        );
        poll(
            "the sweeper to end both break-glasses",
            Duration::from_secs(150),
            || {
                let flux = e.metadata("cm/flux-hotfix");
                let argo = e.metadata("cm/argo-hotfix");
                let app = e.application();
                let clean = |m: &serde_json::Value| {
                    m["annotations"].as_object().is_none_or(|a| {
                        !a.keys().any(|k| {
                            k.starts_with("driftguard.io/")
                                || k == "kustomize.toolkit.fluxcd.io/reconcile"
                        })
                    }) && m["labels"].get("driftguard.io/break-glass").is_none()
                };
                if clean(&flux)
                    && clean(&argo)
                    && e.records().is_empty()
                    && app.get("argocd.argoproj.io/skip-reconcile").is_none()
                    && app.get("driftguard.io/break-glass-paused-for").is_none()
                {
                    Ok(())
                } else {
                    Err(format!(
                        "flux-hotfix {flux}; argo-hotfix {argo}; application {app}; records {:?}; {}",
                        e.records(),
                        e.dg().proc.stderr_tail(300)
                    ))
                }
            },
        )?;
        let after = e.metric("driftguard_break_glass_expired_total");
        ensure!(
            after >= before + 2,
            "driftguard_break_glass_expired_total {before} -> {after}"
        );
        let ended: Vec<_> = e
            .dg()
            .audit()
            .into_iter()
            .filter(|r| {
                r["endpoint"] == "validate"
                    && r["user"] == "driftguard"
                    && r["reason"] == "break-glass-ended"
                    && r["verdict"] == "allow"
            })
            .collect();
        ensure!(
            ["flux-hotfix", "argo-hotfix"]
                .iter()
                .all(|n| ended.iter().any(|r| r["name"] == *n)),
            "no break-glass-ended audit records by driftguard: {ended:?}"
        );
        Ok(())
    })
}

/// A break-glass ended by hand (an authorized user removes its keys; the
/// Application's pause is not theirs to lift): the sweeper finds the pause
/// from the Application's own list and lifts it, once it has been held by
/// no armed object for longer than a write may be in flight (70 s).
#[test]
fn a_pause_left_behind_is_lifted() {
    run(|e| {
        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "cm/argo-hotfix",
                "-n",
                "production",
                "--reason",
                "INC-52 ended by hand",
                "--for",
                "30m",
            ],
        );
        ensure!(out.code == 0, "arming configmap/argo-hotfix: {out}");
        let app = e.application();
        ensure!(
            app["driftguard.io/break-glass-paused-for"] == "/ConfigMap:production/argo-hotfix",
            "the Application is not paused for configmap/argo-hotfix: {app}"
        );
        let removed = r#"{"metadata":{"labels":{"driftguard.io/break-glass":null},"annotations":{"driftguard.io/break-glass":null,"driftguard.io/break-glass-expires":null,"driftguard.io/break-glass-paused":null}}}"#;
        let out = e.plane.kubectl(
            "sam",
            &[
                "-n",
                "production",
                "patch",
                "cm/argo-hotfix",
                "--type=merge",
                "-p",
                removed,
            ],
        );
        ensure!(out.ok, "sam ends the break-glass by hand: {out}");
        poll(
            "the sweeper to lift the pause left behind",
            Duration::from_secs(150),
            || {
                let app = e.application();
                if app.get("argocd.argoproj.io/skip-reconcile").is_none()
                    && app.get("driftguard.io/break-glass-paused-for").is_none()
                {
                    Ok(())
                } else {
                    Err(format!(
                        "application {app}; records {:?}; {}",
                        e.records(),
                        e.dg().proc.stderr_tail(300)
                    ))
                }
            },
        )
    })
}

/// Objects that carry the break-glass label, and even expired break-glass
/// annotations and Flux's labels, but that driftguard never armed: a Pod and
/// a ReplicaSet (a template copies all of it), an object with a controller
/// owner, and one with the label alone. Stripping the label from them would
/// release and recreate Pods on every sweep.
fn decoys() -> String {
    let labels = r#"{app: decoy, driftguard.io/break-glass: "true", kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}"#;
    let expired = r#"{driftguard.io/break-glass: "copied by a template", driftguard.io/break-glass-expires: "2020-01-01T00:00:00Z"}"#;
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: decoy-pod
  namespace: production
  labels: {labels}
  annotations: {expired}
spec:
  containers: [{{name: c, image: registry.invalid/decoy}}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: decoy-rs
  namespace: production
  labels: {labels}
  annotations: {expired}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: decoy, driftguard.io/break-glass: "true"}}}}
  template:
    metadata: {{labels: {labels}}}
    spec:
      containers: [{{name: c, image: registry.invalid/decoy}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: decoy-owned
  namespace: production
  labels: {labels}
  annotations: {expired}
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: flux-settings, uid: 6b1b2c3d-0000-4000-8000-000000000001, controller: true}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: decoy-label-only
  namespace: production
  labels: {labels}
"#
    )
}

/// The sweeper leaves the [`decoys`] alone while it ends a real break-glass.
#[test]
fn the_sweeper_touches_only_what_driftguard_armed() {
    run(|e| {
        let out = e
            .plane
            .kubectl_as_stdin(FLUX, &["apply", "-f", "-"], Some(&decoys()));
        ensure!(out.ok, "the decoys: {out}");
        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "cm/flux-hotfix",
                "-n",
                "production",
                "--reason",
                "INC-53 beside decoys",
                "--for",
                "4s",
            ],
        );
        ensure!(out.code == 0, "arming configmap/flux-hotfix for 4s: {out}");
        poll(
            "the sweeper to end the real break-glass and drop its record",
            Duration::from_secs(150),
            || {
                let meta = e.metadata("cm/flux-hotfix");
                let records = e.records();
                match meta["labels"].get("driftguard.io/break-glass") {
                    None if records.is_empty() => Ok(()),
                    _ => Err(format!(
                        "flux-hotfix {meta}; records {records:?}; {}",
                        e.dg().proc.stderr_tail(300)
                    )),
                }
            },
        )?;
        // Nothing recorded a decoy: the webhook records only what the
        // sweeper would end, and the sweeper reads only what is recorded.
        let recorded = e.records();
        ensure!(
            recorded.is_empty(),
            "records left after the real break-glass ended: {recorded:?}"
        );
        let patched: Vec<_> = e
            .dg()
            .audit()
            .into_iter()
            .filter(|r| {
                r["user"] == "driftguard"
                    && r["name"].as_str().is_some_and(|n| n.starts_with("decoy-"))
            })
            .collect();
        ensure!(
            patched.is_empty(),
            "the sweeper wrote to objects driftguard never armed: {patched:?}"
        );
        for target in [
            "pod/decoy-pod",
            "replicaset/decoy-rs",
            "cm/decoy-owned",
            "cm/decoy-label-only",
        ] {
            let meta = e.metadata(target);
            ensure!(
                meta["labels"]["driftguard.io/break-glass"] == "true",
                "the sweeper patched {target}, which driftguard never armed: {meta}"
            );
        }
        // The plugin refuses to arm what the sweeper would never end.
        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "rs/decoy-rs",
                "-n",
                "production",
                "--reason",
                "INC-53",
                "--for",
                "10m",
            ],
        );
        ensure!(
            out.code == 2 && out.stderr.contains("Pods and ReplicaSets are never armed"),
            "arming a ReplicaSet: {out}"
        );
        Ok(())
    })
}
