//! Arming and ending break-glass: refusals, pauses of Argo CD and Flux, the
//! server deciding, an Application that cannot be paused.

use super::*;

#[test]
fn break_glass_refused_granted_ended() {
    run(|e| {
        let args = [
            "break-glass",
            "deploy/myapp",
            "-n",
            "production",
            "--reason",
            "INC-42 hotfix",
            "--for",
            "1h",
        ];
        let out = e.plugin("alice", &args);
        ensure!(out.code == 1, "alice was not refused: {out}");
        // The server's answer, in driftguard's own words; the ConfigMap's copy
        // of the policy only adds a hint.
        ensure!(
        out.stderr.contains("denied: admission webhook \"")
            && out.stderr.contains(
                "driftguard: alice is not authorized to break glass on Deployment production/myapp"
            )
            && out.stderr.contains("nothing was written")
            && out.stderr.contains("hint: user alice (groups: developers")
            && out
                .stderr
                .contains("allows users [sam] and groups [incident]"),
        "the refusal is not the webhook's: {out}"
    );
        let annotations = e.annotations();
        ensure!(
            annotations.get("driftguard.io/break-glass").is_none(),
            "alice's refusal wrote: {annotations}"
        );
        let app = e.application();
        ensure!(
            app.get("argocd.argoproj.io/skip-reconcile").is_none(),
            "alice's refusal paused the Application: {app}"
        );
        let mut too_long = args;
        too_long[7] = "3h";
        let out = e.plugin("sam", &too_long);
        ensure!(
            out.code == 1
                && out.stderr.contains("denied: admission webhook \"")
                && out.stderr.contains("is more than 2h ahead")
                && out
                    .stderr
                    .contains("hint: --for 3h is longer than breakGlass.maxDuration 2h"),
            "--for 3h with maxDuration 2h: {out}"
        );
        let app = e.application();
        ensure!(
            app.get("argocd.argoproj.io/skip-reconcile").is_none(),
            "a refused break-glass paused the Application: {app}"
        );
        // The same refusal, machine-readable.
        let out = e.plugin("sam", &[&too_long[..], &["-o", "json"]].concat());
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("break-glass -o json: {err}: {out}"))?;
        ensure!(
            out.code == 1
                && r["action"] == "refused"
                && r["user"] == "sam"
                && r["reason"] == "INC-42 hotfix"
                && r["expires"].is_null()
                && r["object"]
                    == serde_json::json!({"kind": "Deployment", "name": "myapp", "namespace": "production"})
                && r["refusal"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("admission webhook \"")
                        && t.contains("is more than 2h ahead"))
                && r["hint"]
                    .as_str()
                    .is_some_and(|t| t.contains("maxDuration")),
            "break-glass -o json, refused: {out}"
        );

        let out = e.plugin("sam", &args);
        ensure!(out.code == 0, "sam's break-glass: {out}");
        ensure!(
            out.stdout.contains("expires") || out.stdout.contains("until"),
            "no expiry printed: {out}"
        );
        // Argo CD is paused for it: skip-reconcile on the Application, which
        // records the object; the object records the pause and carries the label.
        ensure!(
            out.stdout
                .contains("Argo CD Application argocd/myapp is paused (skip-reconcile) until "),
            "the pause is not reported: {out}"
        );
        let app = e.application();
        ensure!(
            app["argocd.argoproj.io/skip-reconcile"] == "true"
                && app["driftguard.io/break-glass-paused-for"]
                    == "apps/Deployment:production/myapp",
            "the Application is not paused for deployment/myapp: {app}"
        );
        let meta = e.metadata("deployment/myapp");
        ensure!(
            meta["annotations"]["driftguard.io/break-glass-paused"]
                == "argocd.argoproj.io/skip-reconcile"
                && meta["labels"]["driftguard.io/break-glass"] == "true",
            "the object does not record the pause: {meta}"
        );
        let annotations = e.annotations();
        ensure!(
            annotations["driftguard.io/break-glass"] == "INC-42 hotfix",
            "reason annotation: {annotations}"
        );
        let expires = annotations["driftguard.io/break-glass-expires"]
            .as_str()
            .unwrap_or_default();
        let at: jiff::Timestamp = expires
            .parse()
            .map_err(|err| format!("expiry {expires:?} is not RFC 3339: {err}"))?;
        let ahead = at.duration_since(jiff::Timestamp::now());
        ensure!(
            ahead > jiff::SignedDuration::from_mins(55)
                && ahead <= jiff::SignedDuration::from_hours(1),
            "expiry {expires} is not about 1h ahead"
        );
        // The break-glass works: sam's manual change is now allowed.
        let out = e.kubectl(
            "sam",
            "-n production set image deployment/myapp app=nginx:1.28",
        );
        ensure!(out.code == 0, "sam's change under break-glass: {out}");
        let out = e.plugin(
            "alice",
            &[
                "explain",
                "deployment/myapp",
                "-n",
                "production",
                "-o",
                "json",
            ],
        );
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("explain -o json: {err}: {out}"))?;
        ensure!(
            r["breakGlass"]["onObject"]["state"] == "active"
                && r["breakGlass"]["onObject"]["reason"] == "INC-42 hotfix",
            "explain does not show the active break-glass: {r}"
        );

        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "deployment/myapp",
                "-n",
                "production",
                "--end",
                "-o",
                "yaml",
            ],
        );
        ensure!(
            out.code == 0
                && out.stdout.contains("action: ended")
                && out.stdout.contains("user: sam")
                && out.stdout.contains("state: resumed"),
            "--end -o yaml: {out}"
        );
        let meta = e.metadata("deployment/myapp");
        let annotations = &meta["annotations"];
        ensure!(
            annotations.get("driftguard.io/break-glass").is_none()
                && annotations
                    .get("driftguard.io/break-glass-expires")
                    .is_none()
                && annotations
                    .get("driftguard.io/break-glass-paused")
                    .is_none()
                && meta["labels"].get("driftguard.io/break-glass").is_none(),
            "--end left annotations or the label: {meta}"
        );
        let app = e.application();
        ensure!(
            app.get("argocd.argoproj.io/skip-reconcile").is_none()
                && app.get("driftguard.io/break-glass-paused-for").is_none(),
            "--end did not resume the Application: {app}"
        );
        Ok(())
    })
}

/// A Flux object: the pause is `reconcile: disabled` in the arming write,
/// the object stays judged while paused, and `--end` removes what arming added.
#[test]
fn break_glass_pauses_flux() {
    run(|e| {
        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "cm/flux-hotfix",
                "-n",
                "production",
                "--reason",
                "INC-50",
                "--for",
                "1h",
            ],
        );
        ensure!(
            out.code == 0
                && out
                    .stdout
                    .contains("Flux will not reconcile configmap/flux-hotfix until ")
                && out.stdout.contains("Git wins again after that"),
            "sam's break-glass on a Flux object: {out}"
        );
        let meta = e.metadata("cm/flux-hotfix");
        ensure!(
            meta["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"] == "disabled"
                && meta["annotations"]["driftguard.io/break-glass-paused"]
                    == "kustomize.toolkit.fluxcd.io/reconcile"
                && meta["labels"]["driftguard.io/break-glass"] == "true",
            "not paused for Flux: {meta}"
        );
        // Paused by driftguard, it is still judged: alice is denied, sam allowed.
        let out = e.kubectl(
            "alice",
            "-n production patch configmap/flux-hotfix -p {\"data\":{\"MODE\":\"alice\"}}",
        );
        ensure!(
            out.code != 0 && out.stderr.contains("driftguard"),
            "alice's edit of a paused object went through: {out}"
        );
        let out = e.kubectl(
            "sam",
            "-n production patch configmap/flux-hotfix -p {\"data\":{\"MODE\":\"hotfix\"}}",
        );
        ensure!(out.code == 0, "sam's hotfix under break-glass: {out}");
        // Unauthorized, alice may not end a break-glass in force.
        let out = e.kubectl(
        "alice",
        "-n production annotate configmap/flux-hotfix driftguard.io/break-glass- driftguard.io/break-glass-expires- driftguard.io/break-glass-paused- kustomize.toolkit.fluxcd.io/reconcile-",
    );
        ensure!(out.code != 0, "alice ended sam's break-glass: {out}");
        let out = e.plugin(
            "sam",
            &["break-glass", "cm/flux-hotfix", "-n", "production", "--end"],
        );
        ensure!(
            out.code == 0
                && out
                    .stdout
                    .contains("Flux reconciles configmap/flux-hotfix from Git again"),
            "--end: {out}"
        );
        let meta = e.metadata("cm/flux-hotfix");
        ensure!(
            meta["annotations"]
                .as_object()
                .is_none_or(|a| !a.keys().any(|k| k.starts_with("driftguard.io/")
                    || k == "kustomize.toolkit.fluxcd.io/reconcile"))
                && meta["labels"].get("driftguard.io/break-glass").is_none(),
            "--end left something: {meta}"
        );
        Ok(())
    })
}

/// rita may break glass (group incident) but may read neither driftguard's
/// policy ConfigMap nor Applications: the server's dry run decides, not the
/// embedded default the plugin falls back to (which allows no one). A copy
/// of the policy that says yes decides nothing either.
#[test]
fn break_glass_is_decided_by_the_server() {
    run(|e| {
        let arm = |target: &str| {
            e.plugin(
                "rita",
                &[
                    "break-glass",
                    target,
                    "-n",
                    "production",
                    "--reason",
                    "INC-7",
                    "--for",
                    "30m",
                ],
            )
        };
        let end = |target: &str| {
            e.plugin(
                "rita",
                &["break-glass", target, "-n", "production", "--end"],
            )
        };
        let cleaned = |meta: &serde_json::Value| {
            meta["annotations"]
                .as_object()
                .is_none_or(|a| !a.keys().any(|k| k.starts_with("driftguard.io/")))
                && meta["labels"].get("driftguard.io/break-glass").is_none()
        };
        let out = arm("cm/rita-flux");
        ensure!(
            out.code == 0
                && out
                    .stderr
                    .contains("cannot read the policy from ConfigMap driftguard/driftguard-policy")
                && out
                    .stdout
                    .contains("Flux will not reconcile configmap/rita-flux until "),
            "rita's break-glass without the policy ConfigMap: {out}"
        );
        let meta = e.metadata("cm/rita-flux");
        ensure!(
            meta["annotations"]["driftguard.io/break-glass"] == "INC-7"
                && meta["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"] == "disabled"
                && meta["labels"]["driftguard.io/break-glass"] == "true",
            "rita's break-glass is not armed: {meta}"
        );
        let out = end("cm/rita-flux");
        ensure!(
            out.code == 0 && cleaned(&e.metadata("cm/rita-flux")),
            "rita's --end: {out}"
        );

        // An Argo CD object whose Application rita may not read: armed without
        // a pause, with a warning that names the command that pauses it by hand.
        let out = arm("cm/rita-argo");
        ensure!(
        out.code == 0
            && out.stderr.contains(
                "warning: Argo CD is NOT paused for configmap/rita-argo: self-heal may revert the hotfix"
            )
            && out.stderr.contains(
                "`kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile=true`"
            )
            && out
                .stdout
                .contains("cannot get Argo CD Application argocd/myapp"),
        "rita's break-glass on an Argo CD object: {out}"
    );
        let meta = e.metadata("cm/rita-argo");
        ensure!(
            meta["annotations"]["driftguard.io/break-glass"] == "INC-7"
                && meta["annotations"]
                    .get("driftguard.io/break-glass-paused")
                    .is_none()
                && meta["labels"]["driftguard.io/break-glass"] == "true",
            "armed without a pause, the object must carry no pause marker: {meta}"
        );
        let app = e.application();
        ensure!(
            app.get("argocd.argoproj.io/skip-reconcile").is_none(),
            "the Application was paused: {app}"
        );
        let out = end("cm/rita-argo");
        ensure!(
            out.code == 0 && cleaned(&e.metadata("cm/rita-argo")),
            "rita's --end of the Argo CD object: {out}"
        );

        // alice names a copy of the policy that grants her break-glass: the
        // server, whose policy does not, refuses; nothing is paused or written.
        e.plane.apply_admin(
            r#"{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alice-policy", "namespace": "production"},
            "data": {"policy.yaml": "breakGlass:\n  allowedUsers: [alice]\n"}}"#,
        );
        let out = e.plugin(
            "alice",
            &[
                "break-glass",
                "deploy/myapp",
                "-n",
                "production",
                "--reason",
                "mine",
                "--for",
                "1h",
                "--policy-configmap",
                "production/alice-policy",
            ],
        );
        ensure!(
            out.code == 1
                && out.stderr.contains("denied: admission webhook \"")
                && out.stderr.contains(
                    "alice is not authorized to break glass on Deployment production/myapp"
                )
                && !out.stderr.contains("hint:"),
            "a policy copy granting alice decided: {out}"
        );
        ensure!(
            e.annotations().get("driftguard.io/break-glass").is_none()
                && e.application()
                    .get("argocd.argoproj.io/skip-reconcile")
                    .is_none(),
            "alice's refused break-glass wrote something"
        );
        let out = e.plane.kubectl(
            "admin",
            &["-n", "production", "delete", "configmap", "alice-policy"],
        );
        ensure!(out.ok, "{out}");
        Ok(())
    })
}

/// An Argo CD object whose Application does not exist: the break-glass is
/// armed (the server allows it) with a warning and the command that pauses
/// the Application by hand; `--require-pause` refuses it instead.
#[test]
fn an_application_that_cannot_be_paused() {
    run(|e| {
        let args = [
            "break-glass",
            "cm/ghost-settings",
            "-n",
            "production",
            "--reason",
            "INC-9",
            "--for",
            "30m",
        ];
        let out = e.plugin("sam", &[&args[..], &["--require-pause"]].concat());
        ensure!(
        out.code == 1
            && out.stderr.contains(
                "refused: --require-pause: Argo CD is NOT paused for configmap/ghost-settings: Argo CD Application argocd/ghost not found"
            )
            && out.stderr.contains("nothing was written"),
        "--require-pause with no Application: {out}"
    );
        let meta = e.metadata("cm/ghost-settings");
        ensure!(
            meta["annotations"]
                .get("driftguard.io/break-glass")
                .is_none()
                && meta["labels"].get("driftguard.io/break-glass").is_none(),
            "--require-pause wrote: {meta}"
        );
        let out = e.plugin("sam", &[&args[..], &["-o", "json"]].concat());
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("break-glass -o json: {err}: {out}"))?;
        let cmd = "kubectl annotate applications.argoproj.io -n argocd ghost argocd.argoproj.io/skip-reconcile=true";
        ensure!(
            out.code == 0
                && r["action"] == "granted"
                && r["pause"]["state"] == "not-paused"
                && r["pause"]["pauseByHand"] == cmd
                && r["pause"]["warning"]
                    .as_str()
                    .is_some_and(|w| w.contains("self-heal may revert the hotfix"))
                && out.stderr.contains(&format!("`{cmd}`")),
            "break-glass with no Application: {out}"
        );
        let meta = e.metadata("cm/ghost-settings");
        ensure!(
            meta["annotations"]["driftguard.io/break-glass"] == "INC-9"
                && meta["annotations"]
                    .get("driftguard.io/break-glass-paused")
                    .is_none()
                && meta["labels"]["driftguard.io/break-glass"] == "true",
            "not armed: {meta}"
        );
        // It works: sam's hotfix is allowed.
        let out = e.kubectl(
            "sam",
            "-n production patch configmap/ghost-settings -p {\"data\":{\"MODE\":\"hotfix\"}}",
        );
        ensure!(out.code == 0, "sam's hotfix under break-glass: {out}");
        let out = e.plugin(
            "sam",
            &[
                "break-glass",
                "cm/ghost-settings",
                "-n",
                "production",
                "--end",
            ],
        );
        let meta = e.metadata("cm/ghost-settings");
        ensure!(
            out.code == 0
                && meta["annotations"]
                    .get("driftguard.io/break-glass")
                    .is_none(),
            "--end: {out} {meta}"
        );
        Ok(())
    })
}
