//! `preview` and `explain`: verdicts of dry runs, and what governs an object.

use super::*;

#[test]
fn preview_allowed_and_denied() {
    run(|e| {
        let before = e.annotations();
        // The seed Application ignores /spec/replicas of its Deployments.
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "deployment/myapp",
                "-n",
                "production",
                "--replicas",
                "5",
            ],
        );
        ensure!(out.code == 0, "an ignored field: {out}");
        ensure!(out.stdout.contains("allowed"), "no verdict: {out}");
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "deploy/myapp",
                "-n",
                "production",
                "--set-image",
                "app=nginx:9.9",
            ],
        );
        ensure!(
            out.code == 1,
            "a drifting image change was not denied: {out}"
        );
        ensure!(
            out.stdout
                .contains("/spec/template/spec/containers/0/image")
                && out.stdout.contains("denied"),
            "the denial does not name the drifted path: {out}"
        );
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "cm/settings",
                "-n",
                "production",
                "-p",
                r#"{"data":{"LOG_LEVEL":"debug"}}"#,
                "-o",
                "json",
            ],
        );
        ensure!(out.code == 1, "a drifting ConfigMap patch: {out}");
        let report: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
        ensure!(
            report["allowed"] == false
                && report["driftedPaths"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p == "/data/LOG_LEVEL")),
            "-o json report: {report}"
        );
        // -f FILE: the whole object, replaced (dry run), once with an ignored
        // change and once with a drifting one.
        let got = e.plane.kubectl(
            "admin",
            &["-n", "production", "get", "deployment/myapp", "-o", "json"],
        );
        ensure!(got.ok, "{got}");
        let mut object: serde_json::Value = serde_json::from_str(&got.stdout).unwrap();
        object["spec"]["replicas"] = serde_json::json!(7);
        let file = e.plane.dir.join("myapp-replicas.json");
        std::fs::write(&file, object.to_string()).unwrap();
        let path = file.display().to_string();
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "deployment/myapp",
                "-n",
                "production",
                "-f",
                &path,
            ],
        );
        ensure!(out.code == 0, "-f with an ignored change: {out}");
        object["spec"]["template"]["spec"]["containers"][0]["image"] =
            serde_json::json!("nginx:6.6");
        std::fs::write(&file, object.to_string()).unwrap();
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "deployment/myapp",
                "-n",
                "production",
                "-f",
                &path,
            ],
        );
        ensure!(
            out.code == 1
                && out
                    .stdout
                    .contains("/spec/template/spec/containers/0/image"),
            "-f with a drifting change: {out}"
        );
        let out = e.plugin(
            "alice",
            &["preview", "cm/settings", "-n", "production", "-f", &path],
        );
        ensure!(out.code == 2, "-f holding another object: {out}");
        // Dry runs change nothing.
        let image = e.plane.kubectl(
            "admin",
            &[
                "-n",
                "production",
                "get",
                "deployment/myapp",
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
            ],
        );
        ensure!(
            image.stdout != "5 nginx:9.9" && e.annotations() == before,
            "a preview wrote: {image}"
        );
        Ok(())
    })
}

/// More drifted paths than the denial's message names (5), one longer than
/// a warning line (120 characters): `preview -o json` returns every one
/// whole, read from the denial's `details.causes` through the real apiserver.
#[test]
fn preview_names_every_drifted_path_whole() {
    run(|e| {
        let long = format!("LONG_{}", "K".repeat(140));
        let mut keys: Vec<String> = (0..6).map(|i| format!("KEY_{i}")).collect();
        keys.push(long.clone());
        let data: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (k.clone(), serde_json::json!("x")))
            .collect();
        let patch = serde_json::json!({ "data": data }).to_string();
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "cm/settings",
                "-n",
                "production",
                "-p",
                &patch,
                "-o",
                "json",
            ],
        );
        ensure!(out.code == 1, "a drifting ConfigMap patch: {out}");
        let report: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
        let mut got: Vec<String> = report["driftedPaths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect();
        got.sort();
        let mut want: Vec<String> = keys.iter().map(|k| format!("/data/{k}")).collect();
        want.sort();
        ensure!(
            got == want && report["driftedPathsComplete"] == true,
            "every drifted path, whole: want {want:?}, got {report}"
        );
        // The message itself stays short: five paths and a count.
        ensure!(
            report["message"]
                .as_str()
                .is_some_and(|m| m.contains("(and 2 more)")),
            "the denial's message: {report}"
        );
        // Warn mode: allowed, so no denial carries the paths; each is one
        // warning line, and the long one is cut there: preview says the list is
        // incomplete rather than report a cut path.
        let out = e
            .plane
            .kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(WARN_SETTINGS));
        ensure!(out.ok, "{out}");
        let preview = |patch: &str| -> Result<serde_json::Value, String> {
            let out = e.plugin(
                "alice",
                &[
                    "preview",
                    "cm/warn-settings",
                    "-n",
                    "production",
                    "-p",
                    patch,
                    "-o",
                    "json",
                ],
            );
            ensure!(out.code == 0, "a drifting patch in warn mode: {out}");
            serde_json::from_str(&out.stdout).map_err(|err| format!("not JSON: {err}: {out}"))
        };
        let report = preview(r#"{"data":{"A":"x","B":"x"}}"#)?;
        ensure!(
            report["driftedPaths"] == serde_json::json!(["/data/A", "/data/B"])
                && report["driftedPathsComplete"] == true,
            "warn mode, two short paths: {report}"
        );
        let patch = serde_json::json!({"data": {"A": "y", &long: "x"}}).to_string();
        let report = preview(&patch)?;
        ensure!(
            report["driftedPaths"] == serde_json::json!(["/data/A"])
                && report["driftedPathsComplete"] == false,
            "warn mode, a path longer than a warning line: {report}"
        );
        Ok(())
    })
}

/// A ConfigMap of the seed Application in warn mode.
const WARN_SETTINGS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: warn-settings
  namespace: production
  annotations:
    argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/warn-settings"
    driftguard.io/mode: warn
data: {MODE: normal}
"#;

#[test]
fn explain_an_argo_cd_object() {
    run(|e| {
        let out = e.plugin(
            "alice",
            &["explain", "deployment/myapp", "-n", "production"],
        );
        ensure!(out.code == 0, "explain: {out}");
        for needle in [
            "Argo CD Application argocd/myapp",
            "repo https://github.com/myorg/gitops-repo.git",
            "path applications/myapp, diff three-way",
            "enforce (from the policy's default mode (ConfigMap driftguard/driftguard-policy))",
            "covers now: /spec/replicas",
            "you are alice",
            "you may not break glass",
        ] {
            ensure!(
                out.stdout.contains(needle),
                "explain lacks {needle:?}: {out}"
            );
        }
        let out = e.plugin(
            "sam",
            &["explain", "deploy/myapp", "-n", "production", "-o", "json"],
        );
        ensure!(out.code == 0, "explain -o json: {out}");
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
        ensure!(
            r["managedBy"]["name"] == "myapp"
                && r["managedBy"]["kind"] == "Application"
                && r["mode"]["mode"] == "enforce"
                && r["breakGlass"]["youMayBreakGlass"] == true
                && r["ignoreRules"].as_array().is_some_and(|rules| rules
                    .iter()
                    .any(|rule| rule["coversNow"][0] == "/spec/replicas")),
            "explain -o json: {r}"
        );
        // Argo CD v3.6's per-resource rule, as Argo CD's sync writes it from Git.
        let annotate = |value: &str| {
            e.plane.kubectl_as(
                ARGO,
                &[
                    "-n",
                    "production",
                    "annotate",
                    "--overwrite",
                    "deployment/myapp",
                    value,
                ],
            )
        };
        let image = "/spec/template/spec/containers/0/image";
        let out = annotate(&format!(
            "argocd.argoproj.io/ignore-differences=jsonPointers: [{image}]"
        ));
        ensure!(out.ok, "{out}");
        let out = e.plugin(
            "alice",
            &["explain", "deploy/myapp", "-n", "production", "-o", "json"],
        );
        let _ = annotate("argocd.argoproj.io/ignore-differences-");
        ensure!(out.code == 0, "explain -o json: {out}");
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
        ensure!(
            r["ignoreRules"]
                .as_array()
                .is_some_and(|rules| rules.iter().any(|rule| {
                    rule["from"] == "argocd.argoproj.io/ignore-differences"
                        && rule["coversNow"][0] == image
                })),
            "explain shows no rule from the annotation: {r}"
        );
        Ok(())
    })
}

#[test]
fn explain_a_flux_object() {
    run(|e| {
        // --kubeconfig given to the plugin itself, after its name, as kubectl passes it.
        let kubeconfig = format!("--kubeconfig={}", e.plane.kubeconfig("alice").display());
        let out = e.plugin(
            "admin",
            &[
                "explain",
                "configmap/flux-settings",
                "-n",
                "production",
                &kubeconfig,
            ],
        );
        ensure!(out.code == 0, "explain: {out}");
        for needle in [
            "Flux Kustomization flux-system/apps",
            "covers now: /data/LOG_LEVEL",
            "you are alice",
        ] {
            ensure!(
                out.stdout.contains(needle),
                "explain lacks {needle:?}: {out}"
            );
        }
        // The Kustomization names no account: applied as the controller's own,
        // unless Flux runs with --default-service-account.
        ensure!(
            !out.stdout.contains("Flux reconcile as"),
            "explain names an account the Kustomization does not: {out}"
        );
        let out = e.plugin(
            "alice",
            &[
                "explain",
                "configmap/flux-settings",
                "-n",
                "production",
                "--flux-default-service-account=flux-applier",
            ],
        );
        let account = "Flux reconcile as system:serviceaccount:flux-system:flux-applier";
        ensure!(
            out.code == 0 && out.stdout.contains(account),
            "explain lacks {account:?}: {out}"
        );
        Ok(())
    })
}

#[test]
fn policy_found_by_the_charts_labels() {
    run(|e| {
        // A tenant plants a chart-labelled `*-policy` ConfigMap in their own
        // namespace, granting themselves break-glass: never read.
        let planted = r#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "tenant-policy", "namespace": "production",
                     "labels": {"app.kubernetes.io/name": "driftguard"}},
        "data": {"policy.yaml": "breakGlass:\n  allowedUsers: [alice]\n"}}"#;
        e.plane.apply_admin(planted);
        // The chart installed as release dg: ConfigMap dg-driftguard-policy, not
        // the default name; the default one is back after.
        chart_policy_in_place_of_default(e)?;
        let result = (|| {
            let out = e.plugin("alice", &["explain", "deploy/myapp", "-n", "production"]);
            ensure!(
                out.code == 0
                    && !out.stdout.contains("tenant-policy")
                    && !out.stdout.contains("allowed users [alice]")
                    && out
                        .stdout
                        .contains("Policy:      ConfigMap driftguard/dg-driftguard-policy")
                    && out.stdout.contains("allowed users [sam]")
                    && !out.stderr.contains("embedded default"),
                "the chart's ConfigMap was not found by its labels: {out}"
            );
            // Named explicitly but missing: the embedded default, with a warning.
            let out = e.plugin(
                "alice",
                &[
                    "explain",
                    "deploy/myapp",
                    "-n",
                    "production",
                    "--policy-configmap",
                    "driftguard/nope",
                ],
            );
            ensure!(
                out.code == 0
                    && out.stderr.contains("embedded default")
                    && out.stdout.contains("Policy:      embedded default"),
                "a missing --policy-configmap: {out}"
            );
            Ok(())
        })();
        let back = default_policy_back(e);
        let out = e.plane.kubectl(
            "admin",
            &["-n", "production", "delete", "configmap", "tenant-policy"],
        );
        ensure!(out.ok, "{out}");
        result.and(back)
    })
}
