//! `status`: the webhook configurations, break-glasses in force, metrics, the
//! policy in force, and who may act as a trusted identity.

use super::*;

use std::time::Duration;

/// status with the chart's policy ConfigMap, sam reading webhook
/// configurations, then each configuration broken in turn; everything is put
/// back after: the break-glasses ended, the policy ConfigMap and driftguard's
/// own webhook configurations.
#[test]
fn status_up_then_a_configuration_missing() {
    run(|e| {
        let result = chart_policy_in_place_of_default(e).and_then(|()| {
            with_sam_reading_webhooks(e, || status_up_then_a_configuration_missing_in(e))
        });
        result.and(put_back_after_status(e))
    })
}

/// Undoes what [`status_up_then_a_configuration_missing`] changes that other
/// scenarios read, whichever step it failed in.
fn put_back_after_status(e: &Env) -> Scenario {
    let mut failures = Vec::new();
    let out = e.plugin(
        "sam",
        &["break-glass", "cm/settings", "-n", "production", "--end"],
    );
    if out.code != 0 {
        failures.push(format!("ending the break-glass on cm/settings: {out}"));
    }
    let out = e.kubectl(
        "sam",
        "-n production annotate configmap/flux-settings driftguard.io/break-glass- driftguard.io/break-glass-expires-",
    );
    if out.code != 0 {
        failures.push(format!("ending the break-glass on cm/flux-settings: {out}"));
    }
    let out = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "--ignore-not-found",
            "validatingwebhookconfiguration/dg-driftguard",
            "mutatingwebhookconfiguration/dg-driftguard",
            "validatingwebhookconfiguration/driftguard",
            "mutatingwebhookconfiguration/driftguard",
            "configmap/same-policy",
            "-n",
            "driftguard",
        ],
    );
    if !out.ok {
        failures.push(format!("deleting the webhook configurations: {out}"));
    }
    let policy = e.plane.dir.join("plugin-policy.yaml");
    e.dg().register(&e.plane, &policy.display().to_string());
    e.plane.wait_until_webhook_denies_drift();
    if let Err(why) = default_policy_back(e) {
        failures.push(why);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn status_up_then_a_configuration_missing_in(e: &Env) -> Scenario {
    // A real denial (an Event), and a break-glass that is still active.
    let out = e.kubectl("alice", "-n production label configmap/settings by=hand");
    ensure!(out.code != 0, "alice's label went through: {out}");
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/settings",
            "-n",
            "production",
            "--reason",
            // Terminal controls in a reason (anyone allowed to break glass
            // writes it) would erase and rewrite status lines: escaped.
            "INC-43\u{1b}[2K\rforged",
            "--for",
            "30m",
        ],
    );
    ensure!(out.code == 0, "{out}");
    poll("status to list the Events", Duration::from_secs(15), || {
        let out = e.plugin("admin", &["status"]);
        if out.stdout.contains("ConfigMap production/settings until")
            && out.stdout.contains("INC-43\\u{1b}[2K\\rforged")
            && !out.stdout.contains(['\u{1b}', '\r'])
            && !out.stdout.contains("Deployment production/myapp until")
            && out.stdout.contains("Recent DriftBlocked Events:\n")
            && out.stdout.contains("ConfigMap production/settings: ")
        {
            Ok(())
        } else {
            Err(out.to_string())
        }
    })?;
    // A break-glass set by hand (kubectl annotate, as sam, whom the policy
    // allows): the scan finds it without any BreakGlassUsed Event.
    let expires = (jiff::Timestamp::now().round(jiff::Unit::Second).unwrap()
        + jiff::SignedDuration::from_mins(20))
    .to_string();
    let out = e.kubectl(
        "sam",
        &format!(
            "-n production annotate configmap/flux-settings driftguard.io/break-glass=INC-44-by-hand driftguard.io/break-glass-expires={expires}"
        ),
    );
    ensure!(out.code == 0, "sam's kubectl annotate: {out}");
    ensure!(
        out.stderr
            .contains("Flux will revert this hotfix on its next reconcile:")
            && out
                .stderr
                .contains("`kubectl driftguard break-glass`, which pauses Flux for this object"),
        "a break-glass without a pause does not warn: {out}"
    );
    // As if the apiserver's event TTL had passed: every BreakGlassUsed Event
    // deleted, both break-glasses are still listed.
    let events = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "events.events.k8s.io",
            "-A",
            "--field-selector",
            "reason=BreakGlassUsed",
        ],
    );
    ensure!(events.ok, "deleting the BreakGlassUsed Events: {events}");
    let events = e.plane.kubectl(
        "admin",
        &[
            "get",
            "events.events.k8s.io",
            "-A",
            "--field-selector",
            "reason=BreakGlassUsed",
            "-o",
            "name",
        ],
    );
    ensure!(
        events.ok && events.stdout.trim().is_empty(),
        "BreakGlassUsed Events left: {events}"
    );
    let out = e.plugin("admin", &["status", "-o", "json"]);
    let r: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|err| format!("status -o json: {err}: {out}"))?;
    let listed = r["activeBreakGlass"].as_array().is_some_and(|list| {
        list.iter().any(|b| {
            b["object"] == "ConfigMap production/flux-settings"
                && b["kind"] == "ConfigMap"
                && b["namespace"] == "production"
                && b["name"] == "flux-settings"
                && b["reason"] == "INC-44-by-hand"
                && b["expires"] == expires.as_str()
        }) && list.iter().any(|b| {
            b["object"] == "ConfigMap production/settings"
                && b["reason"] == "INC-43\u{1b}[2K\rforged"
        })
    });
    ensure!(
        listed
            && r["breakGlassScan"]["typesNotReadable"] == 0
            && r["breakGlassScan"]["typesListed"].as_u64() > Some(10),
        "status -o json lacks the annotated ConfigMap: {r}"
    );
    // sam may list ConfigMaps but not Secrets (nor most types): the types
    // sam may not list are skipped and counted, the break-glass still listed.
    let out = e.plugin("sam", &["status", "-o", "json"]);
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("status -o json as sam: {err}: {out}"))?;
    ensure!(
        out.code == 0
            && r["breakGlassScan"]["typesNotReadable"].as_u64() > Some(0)
            && r["breakGlassScan"]["notReadable"]
                .as_array()
                .is_some_and(|l| l.iter().any(|t| t == "secrets"))
            && r["activeBreakGlass"].as_array().is_some_and(|l| l
                .iter()
                .any(|b| b["object"] == "ConfigMap production/flux-settings")),
        "status -o json as sam: {r}"
    );
    let out = e.plugin("sam", &["status"]);
    ensure!(
        out.code == 0
            && out.stdout.contains(" types not readable, not searched: ")
            && out
                .stdout
                .contains("ConfigMap production/flux-settings until "),
        "status as sam: {out}"
    );
    let out = e.plugin("admin", &["status"]);
    ensure!(out.code == 0, "status: {out}");
    for needle in [
        "ValidatingWebhookConfiguration driftguard: present",
        "MutatingWebhookConfiguration driftguard: present",
        "failurePolicy Fail, caBundle present",
        ", reachable from here, caBundle verifies its certificate",
        "Policy: ConfigMap driftguard/dg-driftguard-policy",
        "ConfigMap production/flux-settings until ",
        // Armed by the plugin (Argo CD paused) and by hand (nothing paused).
        "INC-43\\u{1b}[2K\\rforged (paused: argocd.argoproj.io/skip-reconcile)",
        "INC-44-by-hand (nothing paused: the GitOps tool may revert it)",
        "status: ok",
    ] {
        ensure!(
            out.stdout.contains(needle),
            "status lacks {needle:?}: {out}"
        );
    }
    let out = e.plugin("admin", &["status", "-o", "json"]);
    let r: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|err| format!("status -o json: {err}: {out}"))?;
    ensure!(r["healthy"] == true, "status -o json: {r}");
    ensure!(
        r["metrics"]["reachable"] == false,
        "status without --metrics-url of URL webhooks: {r}"
    );
    // driftguard's probe port, read directly: the policy reload counters.
    let url = format!("http://127.0.0.1:{}/metrics", e.dg().probe);
    let out = e.plugin("admin", &["status", "--metrics-url", &url]);
    ensure!(
        out.code == 0
            && out.stdout.contains("Metrics: (")
            && out.stdout.contains("policy reloads 0 ok, 0 failed")
            && out.stdout.contains("decision timeouts 0")
            && out.stdout.contains("internal errors 0"),
        "status --metrics-url: {out}"
    );
    let out = e.plugin("admin", &["status", "--metrics-url", &url, "-o", "json"]);
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("status --metrics-url -o json: {err}: {out}"))?;
    ensure!(
        r["metrics"]["reachable"] == true && r["metrics"]["policyReloads"]["failure"] == 0,
        "status --metrics-url -o json: {r}"
    );
    // A broken policy file, then the good one again: one failed reload, one ok.
    // Each written whole and renamed in: a reload that reads the file between
    // `write`'s truncation and its data sees an empty policy (seen under load).
    let policy = e.plane.dir.join("plugin-policy.yaml");
    let replace = |text: &str| {
        let tmp = e.plane.dir.join("plugin-policy.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &policy).unwrap();
    };
    replace("mode: [not a mode\n");
    let counted = |needle: &'static str| {
        poll(needle, Duration::from_secs(10), || {
            let out = e.plugin("admin", &["status", "--metrics-url", &url]);
            if out.stdout.contains(needle) {
                Ok(())
            } else {
                Err(out.to_string())
            }
        })
    };
    let failed = counted("policy reloads 0 ok, 1 failed");
    replace(POLICY);
    failed?;
    counted("policy reloads 1 ok, 1 failed")?;
    // Which policy is in force: the server's digest, compared with the
    // ConfigMap the plugin reads (the chart's dg one holds another policy).
    let out = e.plugin("admin", &["status", "--metrics-url", &url]);
    let digest = driftguard::policy::digest(POLICY);
    ensure!(
        out.stdout.contains(&format!(
            "Policy in force (server): {digest} from {}, mode enforce: DIFFERS from ConfigMap driftguard/dg-driftguard-policy",
            policy.display()
        )),
        "status does not show the policy in force: {out}"
    );
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "create",
            "configmap",
            "same-policy",
            &format!("--from-file=policy.yaml={}", policy.display()),
        ],
    );
    ensure!(out.ok, "{out}");
    let out = e.plugin(
        "admin",
        &[
            "status",
            "--metrics-url",
            &url,
            "--policy-configmap",
            "driftguard/same-policy",
        ],
    );
    ensure!(
        out.stdout.contains(&format!(
            "{digest} from {}, mode enforce: the same as ConfigMap driftguard/same-policy",
            policy.display()
        )),
        "status does not match the server's policy with the ConfigMap's: {out}"
    );
    // alice may not read webhook configurations: exit 2, naming what was forbidden.
    let out = e.plugin("alice", &["status"]);
    ensure!(
        out.code == 2
            && out.stderr.contains("forbidden")
            && out.stderr.contains("validatingwebhookconfigurations"),
        "status as alice: {out}"
    );
    // A caBundle from another CA: the serving certificate does not verify.
    let other = driftguard::certs::Authority::new("another CA").unwrap();
    let bundle =
        serde_json::to_value(k8s_openapi::ByteString(other.cert_pem.into_bytes())).unwrap();
    let patch = serde_json::json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]);
    let out = e.plane.kubectl(
        "admin",
        &[
            "patch",
            "validatingwebhookconfiguration",
            "driftguard",
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
    );
    ensure!(out.ok, "{out}");
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 1 && out.stdout.contains("caBundle does NOT verify"),
        "status with a wrong caBundle: {out}"
    );
    let gone = e.plane.kubectl(
        "admin",
        &["delete", "mutatingwebhookconfiguration", "driftguard"],
    );
    ensure!(gone.ok, "{gone}");
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 1
            && out
                .stdout
                .contains("MutatingWebhookConfiguration driftguard: MISSING"),
        "status without the mutating configuration: {out}"
    );
    // The chart's pair instead (release dg): found by its labels without --name.
    let gone = e.plane.kubectl(
        "admin",
        &["delete", "validatingwebhookconfiguration", "driftguard"],
    );
    ensure!(gone.ok, "{gone}");
    e.plane.apply_admin(
        &render_chart(
            &e.plane,
            e.dg().port,
            &["policy.breakGlass.allowedUsers={sam}"],
        )
        .webhooks,
    );
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 0
            && out
                .stdout
                .contains("ValidatingWebhookConfiguration dg-driftguard: present")
            && out
                .stdout
                .contains("MutatingWebhookConfiguration dg-driftguard: present"),
        "status with the chart's configurations: {out}"
    );
    Ok(())
}

/// A Service-mode pair `svcprobe` (nothing matches its rules; the apiserver
/// never calls it) and the Secret the chart would mount, `dgsvc/svcprobe-tls`.
fn service_webhook(ca_pem: &str, leaf_pem: &str) -> String {
    let b64 = |pem: &str| {
        serde_json::to_value(k8s_openapi::ByteString(pem.as_bytes().to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    let hook = |kind: &str| {
        format!(
            r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata: {{name: svcprobe}}
webhooks:
  - name: svcprobe.driftguard.io
    clientConfig:
      service: {{namespace: dgsvc, name: svcprobe, path: /validate, port: 443}}
      caBundle: {}
    rules: [{{apiGroups: [example.invalid], apiVersions: [v1], operations: [CREATE], resources: [nothings]}}]
    failurePolicy: Ignore
    sideEffects: None
    admissionReviewVersions: [v1]
"#,
            b64(ca_pem)
        )
    };
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: dgsvc}}
---
apiVersion: v1
kind: Secret
metadata: {{name: svcprobe-tls, namespace: dgsvc}}
type: kubernetes.io/tls
data: {{tls.crt: {}, tls.key: {}}}
{}{}"#,
        b64(leaf_pem),
        b64("unused"),
        hook("ValidatingWebhookConfiguration"),
        hook("MutatingWebhookConfiguration")
    )
}

#[test]
fn status_of_a_service_webhook() {
    run(|e| {
        let dns = "svcprobe.dgsvc.svc".to_owned();
        let ca = driftguard::certs::Authority::new("chart CA").unwrap();
        let (leaf, _) = ca
            .leaf("svcprobe", std::slice::from_ref(&dns), &[])
            .unwrap();
        e.plane.apply_admin(&service_webhook(&ca.cert_pem, &leaf));
        let out = e.plugin("admin", &["status", "--name", "svcprobe"]);
        ensure!(
            out.stdout.contains(
                "caBundle verifies tls.crt of Secret dgsvc/svcprobe-tls for svcprobe.dgsvc.svc"
            ) && out
                .stdout
                .contains("calls service dgsvc/svcprobe, 0 ready endpoint(s)"),
            "status of a Service webhook: {out}"
        );
        // The Secret now holds a leaf from another CA.
        let other = driftguard::certs::Authority::new("another CA").unwrap();
        let (foreign, _) = other.leaf("svcprobe", &[dns], &[]).unwrap();
        e.plane
            .apply_admin(&service_webhook(&ca.cert_pem, &foreign));
        let out = e.plugin("admin", &["status", "--name", "svcprobe", "-o", "json"]);
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("status -o json: {err}: {out}"))?;
        let check = &r["configurations"][0]["webhooks"][0]["servingCertificate"];
        ensure!(
            out.code == 1
                && check["caBundleVerifies"] == false
                && check["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("does NOT verify")),
            "status with a serving certificate from another CA: {out}"
        );
        // Its /metrics through the apiserver's service proxy: no such Service, reported.
        ensure!(
            r["metrics"]["reachable"] == false
                && r["metrics"]["from"] == "service dgsvc/svcprobe port probes",
            "status of a Service webhook without pods, metrics: {r}"
        );
        // sam may read webhook configurations but not Secrets (nor EndpointSlices):
        // the caBundle is not checked, which is said and fails nothing. The
        // exit code is the registration check's: this one webhook is none of
        // those the policy needs, so it skips what the policy judges.
        with_sam_reading_webhooks(e, || {
            let out = e.plugin("sam", &["status", "--name", "svcprobe"]);
            ensure!(
            out.code == 1
                && out.stdout.contains(
                    "caBundle not checked: cannot read Secret dgsvc/svcprobe-tls (needs get on secrets in namespace dgsvc)"
                )
                && out.stdout.contains("Registration against the policy: DIFFERS")
                && out.stdout.contains("skips: the webhook `validate.svcprobe.driftguard.io` is missing"),
            "status as sam, who may not read the Secret: {out}"
        );
            Ok(())
        })?;
        for kind in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            let gone = e.plane.kubectl("admin", &["delete", kind, "svcprobe"]);
            ensure!(gone.ok, "{gone}");
        }
        Ok(())
    })
}

/// alice may impersonate every service account of kube-system, which the
/// default policy trusts (`system:serviceaccount:kube-system:*`). The rule is
/// `edit`'s, spelled out: without kube-controller-manager the aggregated
/// `edit` ClusterRole has no rules.
const ALICE_ACTS_AS_KUBE_SYSTEM: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: impersonate-service-accounts, namespace: kube-system}
rules:
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-acts-as-service-accounts, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: impersonate-service-accounts}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
"#;

#[test]
fn status_names_who_may_act_as_a_trusted_identity() {
    run(|e| {
        e.plane.apply_admin(ALICE_ACTS_AS_KUBE_SYSTEM);
        let result = with_sam_reading_webhooks(e, || {
            // The path is real: alice is now a trusted identity whenever she likes.
            let out = e.kubectl(
                "alice",
                "--as=system:serviceaccount:kube-system:anyone auth whoami",
            );
            ensure!(
                out.code == 0
                    && out
                        .stdout
                        .contains("system:serviceaccount:kube-system:anyone"),
                "alice acting as a kube-system account: {out}"
            );
            let out = e.plugin("admin", &["status"]);
            for needle in [
                "Trusted identities others can act as: ",
                "  system:serviceaccount:kube-system:* (trusted.users), in namespace kube-system:\n    User alice through RoleBinding kube-system/alice-acts-as-service-accounts (Role kube-system/impersonate-service-accounts): impersonate serviceaccounts\n",
                // testkit RBAC (control_plane.rs): developers and sre-oncall create pods in every namespace.
                "Group developers, Group sre-oncall through ClusterRoleBinding workload-editors (ClusterRole workload-editor): create pods",
                "status: ok",
            ] {
                ensure!(
                    out.stdout.contains(needle),
                    "status lacks {needle:?}: {out}"
                );
            }
            // A warning: the exit code stays the webhooks'.
            ensure!(out.code == 0, "status with a finding: {out}");
            let out = e.plugin("admin", &["status", "-o", "json"]);
            let r: serde_json::Value = serde_json::from_str(&out.stdout)
                .map_err(|err| format!("status -o json: {err}: {out}"))?;
            let reach = &r["trustedIdentityReach"];
            let named = reach["findings"].as_array().is_some_and(|l| {
                l.iter().any(|f| {
                f["identity"] == "system:serviceaccount:kube-system:*"
                    && f["trustedBy"] == "trusted.users"
                    && f["namespace"] == "kube-system"
                    && f["binding"] == "RoleBinding kube-system/alice-acts-as-service-accounts"
                    && f["subjects"] == serde_json::json!(["User alice"])
                    && f["ways"]
                        == serde_json::json!([{"how": "impersonate serviceaccounts", "names": []}])
            })
            });
            ensure!(
                out.code == 0 && reach["checked"] == true && named,
                "status -o json lacks alice's binding: {reach}"
            );
            // system:masters (cluster-admin) may remove the webhooks: named apart.
            ensure!(
                reach["clusterAdmins"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|a| a
                        .as_str()
                        .is_some_and(|a| a.contains("Group system:masters")))),
                "status -o json: cluster admins: {reach}"
            );
            // sam may not list RBAC objects: said, and the exit code stays 0.
            let out = e.plugin("sam", &["status"]);
            ensure!(
            out.code == 0
                && out.stdout.contains(
                    "Trusted identities others can act as: not checked: clusterroles.rbac.authorization.k8s.io is forbidden: User \"sam\" cannot list resource \"clusterroles\""
                )
                && out.stdout.contains("(and 3 more refused)\n"),
            "status as sam: {out}"
        );
            Ok(())
        });
        let out = e.plane.kubectl(
            "admin",
            &[
                "-n",
                "kube-system",
                "delete",
                "rolebinding/alice-acts-as-service-accounts",
                "role/impersonate-service-accounts",
            ],
        );
        ensure!(out.ok, "cleaning up: {out}");
        result
    })
}

/// The same reach through constrained impersonation (beta, on by default
/// since v1.36; k8s.io/apiserver `impersonation/mode.go`): `impersonate:serviceaccount`
/// on the accounts in authentication.k8s.io, and `impersonate-on:serviceaccount:create`
/// on what `kubectl auth whoami` creates. No legacy `impersonate` anywhere.
const ALICE_ACTS_AS_KUBE_SYSTEM_CONSTRAINED: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: constrained-impersonation, namespace: kube-system}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [serviceaccounts]
    verbs: ["impersonate:serviceaccount"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-constrained, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: constrained-impersonation}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: whoami-as-service-accounts}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [selfsubjectreviews]
    verbs: ["impersonate-on:serviceaccount:create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-whoami-as-service-accounts}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: whoami-as-service-accounts}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
"#;

/// The apiserver's minor version (`kubectl version`).
fn server_minor(e: &Env) -> Result<u32, String> {
    let out = e.kubectl("admin", "version -o json");
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("kubectl version: {err}: {out}"))?;
    v["serverVersion"]["minor"]
        .as_str()
        .and_then(|m| m.trim_end_matches('+').parse().ok())
        .ok_or_else(|| format!("no server minor version: {out}"))
}

#[test]
fn status_names_constrained_impersonation() {
    run(|e| {
        e.plane.apply_admin(ALICE_ACTS_AS_KUBE_SYSTEM_CONSTRAINED);
        let result = (|| {
            let out = e.kubectl(
                "alice",
                "--as=system:serviceaccount:kube-system:anyone auth whoami",
            );
            // Off by default before v1.36: the path exists only from then on.
            if server_minor(e)? >= 36 {
                ensure!(
                    out.code == 0
                        && out
                            .stdout
                            .contains("system:serviceaccount:kube-system:anyone"),
                    "alice acting as a kube-system account by constrained impersonation: {out}"
                );
            } else {
                // kubectl words the 403 of the impersonation as its own.
                ensure!(
                out.code != 0
                    && out
                        .stderr
                        .contains("selfsubjectreviews API is not enabled in the cluster or you do not have permission"),
                "constrained impersonation before v1.36: {out}"
            );
            }
            let out = e.plugin("admin", &["status"]);
            let needle = "  system:serviceaccount:kube-system:* (trusted.users), in namespace kube-system:\n    User alice through RoleBinding kube-system/alice-constrained (Role kube-system/constrained-impersonation): impersonate:serviceaccount serviceaccounts\n";
            ensure!(
                out.code == 0 && out.stdout.contains(needle),
                "status lacks {needle:?}: {out}"
            );
            Ok(())
        })();
        let out = e.plane.kubectl(
            "admin",
            &[
                "delete",
                "-n",
                "kube-system",
                "rolebinding/alice-constrained",
                "role/constrained-impersonation",
            ],
        );
        let cluster = e.plane.kubectl(
            "admin",
            &[
                "delete",
                "clusterrolebinding/alice-whoami-as-service-accounts",
                "clusterrole/whoami-as-service-accounts",
            ],
        );
        ensure!(out.ok && cluster.ok, "cleaning up: {out} {cluster}");
        result
    })
}
