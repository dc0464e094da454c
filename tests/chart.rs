//! The Helm chart, with helm v3.22.0 built from the Go module proxy: lint,
//! render every values combination, have the real apiserver accept each
//! rendering (`kubectl apply --dry-run=server`), refuse wrong values with a clear
//! message, and match `driftguard register`'s rules. The end-to-end scenarios
//! also run with what the chart renders (tests/e2e_kubectl.rs).

use driftguard_testkit::control_plane;
use driftguard_testkit::generated_certs;

use std::path::PathBuf;
use std::process::Command;

use control_plane::*;
use generated_certs::*;
use serde_json::Value;

struct Rendered {
    ok: bool,
    yaml: String,
    stderr: String,
}

fn template(helm: &PathBuf, sets: &[&str], extra: &[&str]) -> Rendered {
    let mut cmd = Command::new(helm);
    cmd.args([
        "template",
        "dg",
        &format!("{ROOT}/charts/driftguard"),
        "--namespace",
        "driftguard",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.args(extra);
    let out = cmd.output().unwrap();
    Rendered {
        ok: out.status.success(),
        yaml: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The ClusterRole's rules that grant get, list and patch (the expiry sweeper's,
/// Applications' aside), and the Deployment's `--break-glass-sweep-interval`.
fn sweeper_of(docs: &[Value]) -> (Vec<Value>, Option<String>) {
    let rules = find(docs, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verbs"] == serde_json::json!(["get", "list", "patch"]))
        .filter(|r| r["resources"] != serde_json::json!(["applications"]))
        .cloned()
        .collect();
    let flag = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--break-glass-sweep-interval="))
        .map(str::to_owned);
    (rules, flag)
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// What decides which writes reach driftguard: rules and matchConditions.
/// What each webhook is called for: its name's first label, rules, conditions.
fn scope_of(doc: &Value) -> Vec<(Value, Value, Value)> {
    doc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hook| {
            let name = hook["name"].as_str().unwrap().split('.').next().unwrap();
            (
                Value::from(name),
                hook["rules"].clone(),
                hook["matchConditions"].clone(),
            )
        })
        .collect()
}

/// `driftguard register --dry-run` for `policy`.
fn registered(plane: &ControlPlane, policy: Option<&std::path::Path>, name: &str) -> Vec<Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_driftguard"));
    cmd.args(["register", "--url=https://127.0.0.1:8443", "--dry-run"])
        .arg(format!("--name={name}"))
        .arg(format!(
            "--ca-bundle={}",
            plane.dir.join("ca.crt").display()
        ));
    if let Some(policy) = policy {
        cmd.arg(format!("--policy={}", policy.display()));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

/// For policies that change every part of the conditions, the chart renders
/// exactly what `driftguard register` builds from the same policy.
fn chart_and_register_agree(helm: &PathBuf, plane: &ControlPlane) {
    let variants: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("defaults", vec![], vec![]),
        ("warn mode", vec!["policy.mode=warn"], vec![]),
        ("owned fields", vec!["policy.precision=ownedFields"], vec![]),
        (
            "other detector keys",
            vec![
                "policy.gitops.argocd.trackingAnnotation=example.com/owner",
                "policy.gitops.argocd.instanceLabel=",
                "policy.gitops.flux.enabled=false",
            ],
            vec![],
        ),
        (
            "argo off",
            vec!["policy.gitops.argocd.enabled=false"],
            vec![],
        ),
        (
            "detectors off",
            vec![
                "policy.gitops.argocd.enabled=false",
                "policy.gitops.flux.enabled=false",
            ],
            vec![],
        ),
        (
            "planned creates ignored",
            vec!["policy.plannedCreates=ignore"],
            vec![],
        ),
        (
            "warn globs",
            vec![],
            vec![
                "--set-json",
                r#"policy.namespaces=[{"names":["team.a-*","x?"],"mode":"warn"},{"names":["prod"],"mode":"audit"}]"#,
            ],
        ),
        (
            "a class glob",
            vec![],
            vec![
                "--set-json",
                r#"policy.namespaces=[{"names":["dev-[ab]"],"mode":"warn"}]"#,
            ],
        ),
        (
            "no namespaces",
            vec![],
            vec!["--set-json", "policy.namespaces=[]"],
        ),
        (
            "identities",
            vec![],
            vec![
                "--set-json",
                r#"policy.trusted={"users":["ci-bot","ops-*","ci-*-bot"],"groups":["platform","team-*","o'neil"]}"#,
            ],
        ),
    ];
    for (name, sets, extra) in variants {
        let rendered = template(helm, &sets, &extra);
        assert!(rendered.ok, "{name}: {}", rendered.stderr);
        let charted = documents(&rendered.yaml);
        let policy = plane.dir.join("variant-policy.yaml");
        std::fs::write(
            &policy,
            find(&charted, "ConfigMap")["data"]["policy.yaml"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let registered = registered(plane, Some(&policy), "dg-driftguard");
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            assert_eq!(
                scope_of(find(&charted, kind)),
                scope_of(find(&registered, kind)),
                "{name}: {kind}"
            );
        }
    }
}

/// `driftguard register` for real, with a policy of many controllers and
/// trusted identities (one long CEL condition): the apiserver checks the
/// expressions and their cost when it stores the configuration.
fn many_identities_are_accepted_by_the_apiserver(plane: &ControlPlane) {
    let users: Vec<String> = (0..150)
        .map(|i| format!("system:serviceaccount:tenant-{i}:deployer"))
        .collect();
    let prefixes: Vec<String> = (0..60)
        .map(|i| format!("system:serviceaccount:ci-{i}:*"))
        .collect();
    let groups: Vec<String> = (0..40).map(|i| format!("platform-{i}")).collect();
    let group_prefixes: Vec<String> = (0..20).map(|i| format!("oidc:team-{i}-*")).collect();
    let policy = plane.dir.join("many-identities.yaml");
    std::fs::write(
        &policy,
        format!(
            "controllers: {{users: {users:?}, groups: {groups:?}}}\ntrusted: {{users: {prefixes:?}, groups: {group_prefixes:?}}}\nnamespaces: [{{names: [dev-*, 'team-?.staging', sandbox-*], mode: warn}}]\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args([
            "register",
            "--url=https://127.0.0.1:8443",
            "--name=many-identities",
        ])
        .arg(format!(
            "--ca-bundle={}",
            plane.dir.join("ca.crt").display()
        ))
        .arg(format!("--policy={}", policy.display()))
        .arg(format!(
            "--kubeconfig={}",
            plane.kubeconfig("admin").display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the apiserver refused the conditions of many identities: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = plane.kubectl(
        "admin",
        &[
            "get",
            "mutatingwebhookconfiguration/many-identities",
            "-o",
            "jsonpath={.webhooks[0].matchConditions[*].name}",
        ],
    );
    assert_eq!(
        out.stdout,
        "exclude-unmanaged-kinds skip-gitops-and-trusted-identities only-gitops-managed-objects \
         only-where-a-patch-may-follow namespaces-have-their-own-webhook",
        "{out}"
    );
    let out = plane.kubectl(
        "admin",
        &[
            "delete",
            "validatingwebhookconfiguration,mutatingwebhookconfiguration",
            "many-identities",
        ],
    );
    assert!(out.ok, "{out}");
}

#[test]
fn the_chart_lints_renders_and_is_accepted_by_the_apiserver() {
    let helm = helm();
    let out = Command::new(&helm)
        .args(["lint", &format!("{ROOT}/charts/driftguard")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let mut plane = ControlPlane::start("chart");
    plane.add_user("driftguard", &[]);
    plane.create_namespaces(&["driftguard", "argocd", "team-argocd"]);
    plane.apply_crds(&["cert-manager", "monitoring"]);

    let pem = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let (cert, key) = plane
        .ca
        .leaf(
            "dg-driftguard.driftguard.svc",
            &["dg-driftguard.driftguard.svc".into()],
            &[],
        )
        .unwrap();
    let provided = [
        format!("certificates.provided.cert={cert}"),
        format!("certificates.provided.key={key}"),
        format!("certificates.provided.ca={pem}"),
    ];
    let provided: Vec<&str> = provided.iter().map(String::as_str).collect();
    let combinations: Vec<(&str, Vec<&str>)> = vec![
        ("generated CA", vec![]),
        (
            "cert-manager",
            vec!["certificates.certManager.enabled=true"],
        ),
        ("user PEMs", provided.clone()),
        ("warn mode", vec!["policy.mode=warn"]),
        ("url mode", vec!["webhook.url=https://127.0.0.1:8443"]),
        (
            "url mode by name",
            vec!["webhook.url=https://Driftguard.example:8443/"],
        ),
        (
            "monitoring",
            vec![
                "serviceMonitor.enabled=true",
                "prometheusRule.enabled=true",
                "grafanaDashboard.enabled=true",
            ],
        ),
        ("flux", vec!["watch.flux=true"]),
        (
            "flux multi-tenancy lockdown",
            vec![
                "watch.flux=true",
                "watch.fluxDefaultServiceAccount=reconciler",
            ],
        ),
        (
            "break-glass on",
            vec!["policy.breakGlass.allowedGroups={sre-oncall}"],
        ),
        (
            "no break-glass sweeper",
            vec!["breakGlass.restoreAtExpiry=false"],
        ),
        (
            "client auth",
            vec![
                "clientAuth.enabled=true",
                "clientAuth.ca.configMapName=apiserver-client-ca",
                "clientAuth.allowedNames={kube-apiserver-webhooks,webhooks.example}",
            ],
        ),
        (
            "network policy",
            vec![
                "networkPolicy.enabled=true",
                "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
                "networkPolicy.probesFrom[0].namespaceSelector.matchLabels.name=monitoring",
            ],
        ),
        ("guard off", vec!["guard.enabled=false"]),
        (
            "fleet spoke (docs/fleets.md)",
            vec![
                "watch.flux=true",
                "watch.hub.argocdKubeconfigSecret=argocd-hub",
                "watch.hub.fluxKubeconfigSecret=flux-hub",
                "watch.hub.clusterNames={https://spoke-1.example.com:6443,spoke-1}",
                "watch.hub.localArgocdNamespace=team-argocd",
                "watch.hub.localFlux=true",
            ],
        ),
        (
            "narrow break-glass sweeper",
            vec![
                "policy.breakGlass.allowedGroups={sre-oncall}",
                "breakGlass.sweepRules[0].apiGroups={apps}",
                "breakGlass.sweepRules[0].resources={deployments}",
                "breakGlass.sweepInterval=1m",
            ],
        ),
    ];
    for (name, sets) in &combinations {
        let rendered = template(&helm, sets, &[]);
        assert!(rendered.ok, "{name}: {}", rendered.stderr);
        let out = plane.kubectl_stdin(
            "admin",
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&rendered.yaml),
        );
        assert!(out.ok, "{name}: the apiserver refused the rendering: {out}");
        let docs = documents(&rendered.yaml);
        let validating = find(&docs, "ValidatingWebhookConfiguration");
        let hook = &validating["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail", "{name}");
        assert_eq!(hook["sideEffects"], "NoneOnDryRun", "{name}");
        assert_eq!(hook["matchPolicy"], "Equivalent", "{name}");
        assert_eq!(hook["timeoutSeconds"], 5, "{name}");
        let excluded = &hook["namespaceSelector"]["matchExpressions"][0]["values"];
        assert_eq!(
            excluded,
            &serde_json::json!(["kube-system", "driftguard"]),
            "{name}"
        );
        assert!(
            hook["matchConditions"][1]["expression"]
                .as_str()
                .unwrap()
                .contains("argocd-application-controller"),
            "{name}"
        );
        let (sweeper_rules, sweep_flag) = sweeper_of(&docs);
        let applications = serde_json::json!({"apiGroups": ["argoproj.io"],
            "resources": ["applications"], "verbs": ["get", "list", "patch"]});
        // Break-glass is off by default: nothing to sweep, and no grant.
        let break_glass_on = sets
            .iter()
            .any(|s| s.starts_with("policy.breakGlass.allowedGroups"));
        match *name {
            _ if !break_glass_on || *name == "no break-glass sweeper" => {
                assert_eq!(sweep_flag.as_deref(), Some("0"), "{name}");
                assert_eq!(sweeper_rules, Vec::<Value>::new(), "{name}");
            }
            "narrow break-glass sweeper" => {
                assert_eq!(sweep_flag.as_deref(), Some("1m"), "{name}");
                assert_eq!(
                    sweeper_rules,
                    vec![
                        serde_json::json!({"apiGroups": ["apps"], "resources": ["deployments"],
                                            "verbs": ["get", "list", "patch"]})
                    ],
                    "{name}"
                );
            }
            _ => {
                // Every type unless narrowed, since Argo CD and Flux manage any kind.
                assert_eq!(sweep_flag.as_deref(), Some("15s"), "{name}");
                assert_eq!(
                    sweeper_rules,
                    vec![serde_json::json!({"apiGroups": ["*"], "resources": ["*"],
                                            "verbs": ["get", "list", "patch"]})],
                    "{name}"
                );
            }
        }
        let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let policies = docs.iter().filter(|d| d["kind"] == "NetworkPolicy").count();
        if *name == "client auth" {
            for flag in [
                "--client-ca=/client-ca/ca.crt",
                "--client-name=kube-apiserver-webhooks",
                "--client-name=webhooks.example",
            ] {
                assert!(args.contains(&flag), "{name}: no {flag} in {args:?}");
            }
            let volumes = &find(&docs, "Deployment")["spec"]["template"]["spec"]["volumes"];
            let volume = volumes
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "client-ca")
                .unwrap_or_else(|| panic!("{name}: no client-ca volume: {volumes}"));
            assert!(
                find(&docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
                    ["checksum/client-auth"]
                    .is_string(),
                "{name}: a new client CA restarts the pods"
            );
            assert_eq!(
                volume["configMap"],
                serde_json::json!({"name": "apiserver-client-ca",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}]})
            );
        } else {
            assert!(
                !args.iter().any(|a| a.starts_with("--client-")),
                "{name}: {args:?}"
            );
        }
        // The guard reads driftguard's own objects by name, and nothing more.
        let guard_flags = [
            "--guard-namespace=driftguard",
            "--guard-configmap=dg-driftguard-policy",
            "--guard-deployment=dg-driftguard",
            "--guard-webhook-configuration=dg-driftguard",
        ];
        let guard_role = docs
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "dg-driftguard-guard");
        let hooks_rule = serde_json::json!({"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            "resourceNames": ["dg-driftguard"], "verbs": ["list", "watch"]});
        let cluster_rules = find(&docs, "ClusterRole")["rules"]
            .as_array()
            .unwrap()
            .clone();
        if *name == "guard off" {
            assert!(!args.iter().any(|a| a.starts_with("--guard-")), "{args:?}");
            assert!(guard_role.is_none());
            assert!(!cluster_rules.contains(&hooks_rule));
        } else {
            for flag in guard_flags {
                assert!(args.contains(&flag), "{name}: no {flag} in {args:?}");
            }
            assert_eq!(
                guard_role.unwrap_or_else(|| panic!("{name}: no guard Role"))["rules"],
                serde_json::json!([
                    {"apiGroups": [""], "resources": ["configmaps"],
                     "resourceNames": ["dg-driftguard-policy"], "verbs": ["list", "watch"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"],
                     "resourceNames": ["dg-driftguard"], "verbs": ["list", "watch"]}
                ]),
                "{name}"
            );
            assert!(
                cluster_rules.contains(&hooks_rule),
                "{name}: {cluster_rules:?}"
            );
        }
        if *name == "network policy" {
            let policy = find(&docs, "NetworkPolicy");
            assert_eq!(
                policy["spec"]["ingress"],
                serde_json::json!([
                    {"ports": [{"port": 8443, "protocol": "TCP"}],
                     "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]},
                    {"ports": [{"port": 8080, "protocol": "TCP"}],
                     "from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}
                ])
            );
            assert_eq!(
                policy["spec"]["podSelector"]["matchLabels"],
                find(&docs, "Deployment")["spec"]["selector"]["matchLabels"]
            );
        } else {
            assert_eq!(policies, 0, "{name}: a NetworkPolicy by default");
        }
        let role = find(&docs, "ClusterRole");
        let lifts_pause = role["rules"].as_array().unwrap().contains(&applications);
        assert_eq!(lifts_pause, sweep_flag.as_deref() != Some("0"), "{name}");
        // The watches list and watch, never get (tests/e2e_rbac.rs shows it
        // from the apiserver's audit log).
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        {
            for rule in doc["rules"].as_array().unwrap() {
                // The break-glass records are written as well as watched.
                let records = serde_json::json!({"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["list", "watch", "create", "patch", "delete"]});
                if rule["verbs"]
                    .as_array()
                    .unwrap()
                    .contains(&Value::from("watch"))
                    && *rule != records
                {
                    assert_eq!(
                        rule["verbs"],
                        serde_json::json!(["list", "watch"]),
                        "{name}: {rule}"
                    );
                }
            }
        }
        match *name {
            "cert-manager" => {
                // A self-signed root, a CA Issuer from it, the serving
                // certificate from that: the injected CA outlives renewals.
                let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
                    docs.iter().filter(|d| d["kind"] == kind).collect()
                };
                let issuers = of_kind("Issuer");
                let certificates = of_kind("Certificate");
                let named = |list: &[&serde_json::Value], n: &str| {
                    list.iter()
                        .find(|d| d["metadata"]["name"] == n)
                        .map(|d| (*d).clone())
                        .unwrap_or_else(|| panic!("no {n}: {list:?}"))
                };
                assert!(
                    named(&issuers, "dg-driftguard-selfsigned")["spec"]["selfSigned"].is_object()
                );
                let ca = named(&certificates, "dg-driftguard-ca");
                assert_eq!(ca["spec"]["isCA"], true);
                assert_eq!(ca["spec"]["issuerRef"]["name"], "dg-driftguard-selfsigned");
                assert_eq!(
                    named(&issuers, "dg-driftguard")["spec"]["ca"]["secretName"],
                    ca["spec"]["secretName"]
                );
                let leaf = named(&certificates, "dg-driftguard");
                assert_eq!(leaf["spec"]["issuerRef"]["name"], "dg-driftguard");
                assert_ne!(leaf["spec"]["isCA"], true);
                assert_eq!(
                    validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                    "driftguard/dg-driftguard-ca"
                );
            }
            "generated CA" => {
                // One render, one CA: both webhooks trust the CA of the CA
                // Secret, which signed the serving certificate for the Service.
                let rendered = rendered_generated(&docs, "dg-driftguard");
                assert!(is_ca(&rendered.ca_cert), "{name}: the CA is no CA");
                assert!(!is_ca(&rendered.cert), "{name}: the leaf is a CA");
                assert_eq!(rendered.bundle(), rendered.ca_cert, "{name}");
                assert_eq!(rendered.secret_bundle, rendered.ca_cert, "{name}");
                assert_eq!(
                    names(&rendered.cert),
                    [
                        "DNS:dg-driftguard.driftguard.svc",
                        "DNS:dg-driftguard.driftguard.svc.cluster.local"
                    ],
                    "{name}"
                );
                verifies(
                    &rendered.cert,
                    rendered.bundle(),
                    "dg-driftguard.driftguard.svc",
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            "url mode" | "url mode by name" => {
                let (url, host, san) = if *name == "url mode" {
                    (
                        "https://127.0.0.1:8443/validate",
                        "127.0.0.1",
                        "IP:127.0.0.1",
                    )
                } else {
                    (
                        "https://Driftguard.example:8443/validate",
                        "driftguard.example",
                        "DNS:driftguard.example",
                    )
                };
                assert_eq!(hook["clientConfig"]["url"], url);
                // The apiserver checks the URL's host against the certificate.
                let rendered = rendered_generated(&docs, "dg-driftguard");
                assert!(
                    names(&rendered.cert).contains(&san.to_owned()),
                    "{name}: {:?}",
                    names(&rendered.cert)
                );
                verifies(&rendered.cert, rendered.bundle(), host)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            "warn mode" => assert!(
                find(&docs, "ConfigMap")["data"]["policy.yaml"]
                    .as_str()
                    .unwrap()
                    .contains("mode: warn")
            ),
            _ => {}
        }
    }

    // The chart's rules and conditions are driftguard register's.
    chart_and_register_agree(&helm, &plane);
    many_identities_are_accepted_by_the_apiserver(&plane);

    // Wrong values fail the install with a clear message.
    let kubeconfig = plane.kubeconfig("admin").display().to_string();
    for (set, needle) in [
        ("policy.mode=sometimes", "/policy/mode"),
        ("webhook.timeoutSeconds=-1", "/webhook/timeoutSeconds"),
        ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
        ("breakGlass.sweepInterval=soon", "/breakGlass/sweepInterval"),
    ] {
        let out = Command::new(&helm)
            .args([
                "install",
                "dg",
                &format!("{ROOT}/charts/driftguard"),
                "-n",
                "driftguard",
                "--dry-run=server",
                "--kubeconfig",
                &kubeconfig,
                "--set",
                set,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{set}: {err}"
        );
    }
    // Client auth given as PEM renders its own ConfigMap, mounted as ca.crt.
    let pem_set = format!("clientAuth.ca.pem={pem}");
    let rendered = template(
        &helm,
        &[
            "clientAuth.enabled=true",
            &pem_set,
            "clientAuth.allowedNames={kube-apiserver-webhooks}",
        ],
        &[],
    );
    assert!(rendered.ok, "{}", rendered.stderr);
    let out = plane.kubectl_stdin(
        "admin",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&rendered.yaml),
    );
    assert!(out.ok, "client auth by PEM: {out}");
    let docs = documents(&rendered.yaml);
    let client_ca = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "dg-driftguard-client-ca")
        .expect("the client CA ConfigMap");
    assert_eq!(client_ca["data"]["ca.crt"], pem.as_str());
    // Contradictions and half-configurations fail with a clear message.
    for (sets, needle) in [
        (
            vec!["clientAuth.enabled=true", "clientAuth.allowedNames={a}"],
            "set exactly one of secretName, configMapName or pem",
        ),
        (
            vec![
                "clientAuth.enabled=true",
                "clientAuth.allowedNames={a}",
                "clientAuth.ca.secretName=s",
                "clientAuth.ca.configMapName=c",
            ],
            "set exactly one of secretName, configMapName or pem",
        ),
        (
            vec!["clientAuth.enabled=true", "clientAuth.ca.secretName=s"],
            "clientAuth.allowedNames",
        ),
        (
            vec!["networkPolicy.enabled=true"],
            "networkPolicy.enabled needs networkPolicy.webhookFrom",
        ),
        // driftguard refuses break-glass without its sweeper (issue 48).
        (
            vec![
                "policy.breakGlass.allowedGroups={sre-oncall}",
                "breakGlass.restoreAtExpiry=false",
            ],
            "breakGlass.restoreAtExpiry: false with policy.breakGlass allowing someone",
        ),
    ] {
        let rendered = template(&helm, &sets, &[]);
        assert!(
            !rendered.ok && rendered.stderr.contains(needle),
            "{sets:?}: {}",
            rendered.stderr
        );
    }
    let mut both = provided.clone();
    both.push("certificates.certManager.enabled=true");
    let rendered = template(&helm, &both, &[]);
    assert!(
        !rendered.ok
            && rendered
                .stderr
                .contains("choose certManager.enabled or provided PEMs, not both"),
        "{}",
        rendered.stderr
    );
    // kubeVersion: the supported Kubernetes versions render, an older one is
    // refused by name (helm install checks the same against the live apiserver).
    for (version, ok) in [("1.35.0", true), ("1.37.2", true), ("1.34.4", false)] {
        let rendered = template(&helm, &[], &["--kube-version", version]);
        assert_eq!(rendered.ok, ok, "Kubernetes {version}: {}", rendered.stderr);
        if !ok {
            assert!(
                rendered
                    .stderr
                    .contains("chart requires kubeVersion: >=1.35.0-0"),
                "Kubernetes {version}: {}",
                rendered.stderr
            );
        }
    }

    // The documented install, for real, and the documented lock-out recovery.
    let out = Command::new(&helm)
        .args([
            "install",
            "driftguard",
            &format!("{ROOT}/charts/driftguard"),
            "-n",
            "driftguard",
            "--create-namespace",
            // The config-check hook's Job needs a node (none here); its
            // command is tested below, in the_config_check_hook_…
            "--no-hooks",
        ])
        .args([
            "--set",
            "certificates.certManager.enabled=true",
            "--kubeconfig",
            &kubeconfig,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    plane.create_namespaces(&["production"]);
    plane.apply_admin(RBAC);
    plane.apply_admin(CONTROLLER_RBAC);
    let app = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  namespace: production\n  annotations: {argocd.argoproj.io/tracking-id: \"myapp:/ConfigMap:production/app-config\"}\ndata: {a: b}\n";
    assert!(
        plane
            .kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(app))
            .ok,
        "controllers never reach the webhook"
    );
    let out = plane.kubectl(
        "alice",
        &["-n", "production", "label", "configmap/app-config", "x=y"],
    );
    assert!(
        !out.ok && out.stderr.contains("failed calling webhook"),
        "no driftguard pod answers, so this fails closed: {out}"
    );
    helm_releases_work_while_driftguard_is_down(&helm, &plane);
    let out = plane.kubectl(
        "admin",
        &[
            "delete",
            "validatingwebhookconfiguration,mutatingwebhookconfiguration",
            "driftguard",
        ],
    );
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "alice",
        &["-n", "production", "label", "configmap/app-config", "x=y"],
    );
    assert!(out.ok, "after deleting the webhook configurations: {out}");

    generated_certificates_without_lookup(&helm);
    generated_certificates_across_upgrades(&plane);
}

/// Another team's chart, with the labels `helm create` gives every object.
const TINY_CHART: [(&str, &str); 3] = [
    ("Chart.yaml", "apiVersion: v2\nname: tiny\nversion: 0.1.0\n"),
    ("values.yaml", "greeting: hello\nverb: get\n"),
    (
        "templates/objects.yaml",
        r#"{{- define "labels" }}
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}{{ template "labels" . }}
data: {greeting: {{ .Values.greeting }}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .Release.Name }}{{ template "labels" . }}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [{{ .Values.verb }}]}]
"#,
    ),
];

/// While no driftguard pod answers and the chart's webhooks fail closed,
/// Helm releases still work: their objects carry `app.kubernetes.io/instance`
/// beside `meta.helm.sh/release-name`, which is no Argo CD claim, so the
/// apiserver never calls driftguard for them. driftguard's own release
/// upgrades and rolls back (both change its ClusterRole, which is
/// cluster-scoped: the namespaceSelector that spares its namespace does not
/// spare it), and another team's release installs and upgrades.
fn helm_releases_work_while_driftguard_is_down(helm: &PathBuf, plane: &ControlPlane) {
    let started = std::time::Instant::now();
    let kubeconfig = plane.kubeconfig("admin").display().to_string();
    let run = |args: &[&str]| {
        let out = Command::new(helm)
            .args(args)
            .args(["--kubeconfig", &kubeconfig, "--no-hooks"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "helm {args:?} with driftguard down: {err}"
        );
    };
    let get = |what: &[&str], jsonpath: &str| {
        let jsonpath = format!("jsonpath={jsonpath}");
        let out = plane.kubectl("admin", &[&["get"], what, &["-o", &jsonpath]].concat());
        assert!(out.ok, "{out}");
        out.stdout
    };
    // A change to the cluster-scoped ClusterRole, then back.
    let chart = format!("{ROOT}/charts/driftguard");
    let sets = "certificates.certManager.enabled=true,watch.flux=true";
    run(&[
        "upgrade",
        "driftguard",
        &chart,
        "-n=driftguard",
        "--set",
        sets,
    ]);
    let resources = || get(&["clusterrole/driftguard"], "{.rules[*].resources}");
    assert!(resources().contains("kustomizations"), "{}", resources());
    run(&["rollback", "driftguard", "1", "-n=driftguard"]);
    assert!(!resources().contains("kustomizations"), "{}", resources());
    let tiny = plane.dir.join("tiny");
    for (file, text) in TINY_CHART {
        std::fs::create_dir_all(tiny.join(file).parent().unwrap()).unwrap();
        std::fs::write(tiny.join(file), text).unwrap();
    }
    let tiny = tiny.display().to_string();
    run(&["install", "tiny", &tiny, "-n=production"]);
    let sets = "greeting=bonjour,verb=list";
    run(&["upgrade", "tiny", &tiny, "-n=production", "--set", sets]);
    let greeting = get(&["-n", "production", "configmap/tiny"], "{.data.greeting}");
    assert_eq!(greeting, "bonjour");
    assert_eq!(get(&["clusterrole/tiny"], "{.rules[0].verbs[0]}"), "list");
    eprintln!(
        "helm releases with driftguard down: {:?}",
        started.elapsed()
    );
}

/// What one rendering holds for the generated certificates.
fn rendered_generated(docs: &[Value], fullname: &str) -> Generated {
    let secret = |name: String, key: &str| -> String {
        let doc = docs
            .iter()
            .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no Secret {name}"));
        let b64 = doc["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no {key}"));
        String::from_utf8(base64_decode(b64)).unwrap()
    };
    let bundles = docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        })
        .flat_map(|d| d["webhooks"].as_array().unwrap().clone())
        .map(|hook| {
            let b64 = hook["clientConfig"]["caBundle"].as_str().unwrap();
            String::from_utf8(base64_decode(b64)).unwrap()
        })
        .collect();
    Generated {
        ca_cert: secret(format!("{fullname}-ca"), "tls.crt"),
        ca_key: secret(format!("{fullname}-ca"), "tls.key"),
        cert: secret(format!("{fullname}-tls"), "tls.crt"),
        key: secret(format!("{fullname}-tls"), "tls.key"),
        secret_bundle: secret(format!("{fullname}-tls"), "ca.crt"),
        bundles,
    }
}

/// `helm template` cannot look up, so every render of the generated path is
/// a new CA. Rendered for a cluster with Argo CD's API (Argo CD renders with
/// `helm template --api-versions ...`), the chart refuses, unless told that
/// the Application ignores those fields; the other certificate paths render.
fn generated_certificates_without_lookup(helm: &PathBuf) {
    let argo = ["--api-versions", "argoproj.io/v1alpha1"];
    let rendered = template(helm, &[], &argo);
    assert!(
        !rendered.ok
            && rendered
                .stderr
                .contains("rendered without cluster access (helm template, Argo CD)"),
        "the generated path rendered for Argo CD: {}",
        rendered.stderr
    );
    let rendered = template(
        helm,
        &["certificates.generated.allowWithoutLookup=true"],
        &argo,
    );
    assert!(rendered.ok, "{}", rendered.stderr);
    let rendered = template(helm, &["certificates.certManager.enabled=true"], &argo);
    assert!(rendered.ok, "{}", rendered.stderr);
    // Without Argo CD's API (helm lint, a preview), it renders: two renders,
    // two CAs, which is why Argo CD must not apply it.
    let first = rendered_generated(&documents(&template(helm, &[], &[]).yaml), "dg-driftguard");
    let second = rendered_generated(&documents(&template(helm, &[], &[]).yaml), "dg-driftguard");
    assert_ne!(first.ca_cert, second.ca_cert);
}

/// The generated path through real `helm install` and `helm upgrade`, where
/// `lookup` reads the Secrets back: from the layout that kept no CA key, a
/// plain upgrade, a re-issue, a CA rotation and a deleted serving Secret.
fn generated_certificates_across_upgrades(plane: &ControlPlane) {
    let (release, ns, fullname) = ("certs", "certs", "certs-driftguard");
    let svc = "certs-driftguard.certs.svc";
    plane.create_namespaces(&[ns]);
    // The layout before: one Secret with the leaf and its CA, no CA key.
    let old_ca = driftguard::certs::Authority::new("the chart's old CA").unwrap();
    let (old_cert, old_key) = old_ca.leaf(svc, &[svc.to_owned()], &[]).unwrap();
    let old = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": format!("{fullname}-tls"), "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}},
        "stringData": {"tls.crt": old_cert, "tls.key": old_key, "ca.crt": old_ca.cert_pem},
    });
    plane.apply_admin(&old.to_string());
    // Nothing serves: a failed call must not stop the upgrades' own writes.
    let base = ["--set", "webhook.failurePolicy=Ignore"];
    let notes = helm_release(plane, "install", release, ns, &base);
    assert!(
        notes.contains("A new CA: the webhooks trust it and the one it replaces"),
        "{notes}"
    );
    let first = read_generated(plane, ns, fullname);
    assert_ne!(
        first.ca_cert, old_ca.cert_pem,
        "no CA key was stored: a new CA"
    );
    assert_eq!(
        certificates(first.bundle()),
        [certificates(&first.ca_cert), certificates(&old_ca.cert_pem)].concat(),
        "the caBundle holds the new CA and the old one"
    );
    assert_eq!(first.secret_bundle, first.bundle());
    verifies(&old_cert, first.bundle(), svc).expect("the old leaf, still mounted, verifies");
    verifies(&first.cert, first.bundle(), svc).expect("the new leaf verifies");
    verifies(&first.cert, &first.ca_cert, svc).expect("the new leaf is the new CA's");

    // Any later upgrade: the old CA leaves the bundle; nothing else changes.
    let notes = helm_release(plane, "upgrade", release, ns, &["--reuse-values"]);
    assert!(!notes.contains("A new CA"), "{notes}");
    let settled = read_generated(plane, ns, fullname);
    assert_eq!(
        settled.bundle(),
        first.ca_cert,
        "the old CA left the bundle"
    );
    assert_eq!(
        (
            &settled.ca_cert,
            &settled.ca_key,
            &settled.cert,
            &settled.key
        ),
        (&first.ca_cert, &first.ca_key, &first.cert, &first.key),
        "an upgrade with nothing asked changed the certificates"
    );

    // A re-issue: a new leaf from the same CA; the caBundle does not change.
    let reissue = [
        "--reuse-values",
        "--set",
        "certificates.generated.reissue=1",
    ];
    helm_release(plane, "upgrade", release, ns, &reissue);
    let reissued = read_generated(plane, ns, fullname);
    assert_ne!(reissued.cert, settled.cert, "no new leaf");
    assert_ne!(reissued.key, settled.key, "a new leaf with the old key");
    assert_eq!(
        reissued.ca_cert, settled.ca_cert,
        "a re-issue changed the CA"
    );
    assert_eq!(
        reissued.bundle(),
        settled.bundle(),
        "a re-issue changed the caBundle"
    );
    verifies(&reissued.cert, reissued.bundle(), svc).unwrap();
    // The same value again issues nothing.
    helm_release(plane, "upgrade", release, ns, &reissue);
    assert_eq!(read_generated(plane, ns, fullname), reissued);

    // A CA rotation: new CA, new leaf, both CAs in the bundle for one upgrade.
    let rotate = [
        "--reuse-values",
        "--set",
        "certificates.generated.caRotation=1",
    ];
    let notes = helm_release(plane, "upgrade", release, ns, &rotate);
    assert!(notes.contains("run helm upgrade certs again"), "{notes}");
    let rotated = read_generated(plane, ns, fullname);
    assert_ne!(rotated.ca_cert, reissued.ca_cert, "no new CA");
    assert_ne!(rotated.cert, reissued.cert, "no new leaf");
    assert_eq!(
        certificates(rotated.bundle()),
        [
            certificates(&rotated.ca_cert),
            certificates(&reissued.ca_cert)
        ]
        .concat()
    );
    verifies(&reissued.cert, rotated.bundle(), svc).expect("the old leaf verifies");
    verifies(&rotated.cert, &rotated.ca_cert, svc).expect("the new leaf is the new CA's");
    helm_release(plane, "upgrade", release, ns, &["--reuse-values"]);
    let settled = read_generated(plane, ns, fullname);
    assert_eq!(
        settled.bundle(),
        rotated.ca_cert,
        "the old CA left the bundle"
    );
    assert_eq!(settled.cert, rotated.cert);
    // Without the values (no --reuse-values): the recorded ones stand.
    helm_release(plane, "upgrade", release, ns, &base);
    assert_eq!(
        read_generated(plane, ns, fullname),
        settled,
        "an upgrade without the values asked for something"
    );

    // A deleted serving Secret: a new leaf from the kept CA, same caBundle.
    let out = plane.kubectl(
        "admin",
        &["-n", ns, "delete", "secret", &format!("{fullname}-tls")],
    );
    assert!(out.ok, "{out}");
    helm_release(plane, "upgrade", release, ns, &["--reuse-values"]);
    let again = read_generated(plane, ns, fullname);
    assert_ne!(again.cert, settled.cert);
    assert_eq!(
        again.bundle(),
        settled.bundle(),
        "a lost leaf changed the caBundle"
    );
    verifies(&again.cert, again.bundle(), svc).unwrap();

    // In url mode the leaf also names the URL's host, issued from the same CA.
    let url = [
        "--reuse-values",
        "--set",
        "webhook.url=https://127.0.0.1:8443",
    ];
    helm_release(plane, "upgrade", release, ns, &url);
    let url_mode = read_generated(plane, ns, fullname);
    assert_eq!(
        url_mode.bundle(),
        again.bundle(),
        "a new name changed the caBundle"
    );
    verifies(&url_mode.cert, url_mode.bundle(), "127.0.0.1").unwrap();
    let out = Command::new(helm())
        .args(["uninstall", release, "-n", ns, "--kubeconfig"])
        .arg(plane.kubeconfig("admin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = plane.kubectl(
        "admin",
        &["-n", ns, "get", "secret", &format!("{fullname}-ca")],
    );
    assert!(!out.ok, "the CA key outlived the release: {out}");
}

/// A spoke of a fleet (docs/fleets.md): the hub's kubeconfig Secret is
/// mounted read-only and named by flag, with what the hub calls this
/// cluster; a hub without a cluster name, or without its watch, is refused.
#[test]
fn the_hub_options_render_as_flags_and_a_mounted_secret() {
    let helm = helm();
    let out = template(
        &helm,
        &[
            "watch.flux=true",
            "watch.hub.argocdKubeconfigSecret=argocd-hub",
            "watch.hub.fluxKubeconfigSecret=flux-hub",
            "watch.hub.clusterNames={https://spoke-1.example.com:6443,spoke-1}",
            "watch.hub.localArgocdNamespace=team-argocd",
            "watch.hub.localFlux=true",
        ],
        &[],
    );
    assert!(out.ok, "{}", out.stderr);
    let docs = documents(&out.yaml);
    // This cluster's own Argo CD beside the hub's: read where it runs.
    let argocd_cm_grants: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "RoleBinding")
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-argocd-cm"))
        })
        .collect();
    assert_eq!(argocd_cm_grants.len(), 2, "a Role and its binding");
    for grant in &argocd_cm_grants {
        assert_eq!(grant["metadata"]["namespace"], "team-argocd", "{grant}");
    }
    // Both ConfigMaps the watches read by name: argocd-cm, and
    // argocd-cmd-params-cm (which namespaces' Applications Argo CD reconciles).
    let role = argocd_cm_grants
        .iter()
        .find(|d| d["kind"] == "Role")
        .unwrap();
    assert_eq!(
        role["rules"][0]["resourceNames"],
        serde_json::json!(["argocd-cm", "argocd-cmd-params-cm"]),
        "{role}"
    );
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for flag in [
        "--argocd-kubeconfig=/hub/argocd/kubeconfig",
        "--flux-kubeconfig=/hub/flux/kubeconfig",
        "--cluster-name=https://spoke-1.example.com:6443",
        "--cluster-name=spoke-1",
        "--local-argocd-namespace=team-argocd",
        "--local-flux",
    ] {
        assert!(args.contains(&flag), "{flag} in {args:?}");
    }
    let volumes = pod["volumes"].as_array().unwrap();
    for (name, secret) in [("hub-argocd", "argocd-hub"), ("hub-flux", "flux-hub")] {
        let volume = volumes.iter().find(|v| v["name"] == name).unwrap();
        assert_eq!(volume["secret"]["secretName"], secret);
    }
    let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "hub-argocd" && m["readOnly"] == true)
    );

    let refused = template(&helm, &["watch.hub.argocdKubeconfigSecret=argocd-hub"], &[]);
    assert!(
        !refused.ok && refused.stderr.contains("clusterNames"),
        "{}",
        refused.stderr
    );
    let refused = template(
        &helm,
        &[
            "watch.hub.fluxKubeconfigSecret=flux-hub",
            "watch.hub.clusterNames={spoke-1}",
        ],
        &[],
    );
    assert!(
        !refused.ok && refused.stderr.contains("needs watch.flux"),
        "{}",
        refused.stderr
    );
    let lockdown = template(
        &helm,
        &[
            "watch.flux=true",
            "watch.fluxDefaultServiceAccount=reconciler",
        ],
        &[],
    );
    assert!(
        lockdown
            .yaml
            .contains("- --flux-default-service-account=reconciler"),
        "{}",
        lockdown.stderr
    );
    let refused = template(&helm, &["watch.fluxDefaultServiceAccount=reconciler"], &[]);
    assert!(
        !refused.ok && refused.stderr.contains("needs watch.flux"),
        "{}",
        refused.stderr
    );
    let refused = template(&helm, &["watch.flux=true", "watch.hub.localFlux=true"], &[]);
    assert!(
        !refused.ok
            && refused
                .stderr
                .contains("needs watch.hub.fluxKubeconfigSecret"),
        "{}",
        refused.stderr
    );
    let refused = template(&helm, &["watch.hub.localArgocdNamespace=team-argocd"], &[]);
    assert!(
        !refused.ok
            && refused
                .stderr
                .contains("needs watch.hub.argocdKubeconfigSecret"),
        "{}",
        refused.stderr
    );
    // Without a hub, nothing of it renders.
    let plain = template(&helm, &[], &[]);
    assert!(!plain.yaml.contains("/hub/"), "{}", plain.yaml);
}

/// `helm install`'s NOTES: with neither client authentication nor a
/// NetworkPolicy, any pod can post reviews, and the notes say so with the
/// values that close it. `networkPolicy.webhookFrom` alone (the one thing
/// the chart cannot know: where the apiserver calls from) turns the
/// NetworkPolicy on; a default install renders none, so that kind, k3d and
/// managed control planes keep working.
#[test]
fn the_install_notes_warn_when_any_pod_can_post_reviews() {
    let helm = helm();
    let plane = ControlPlane::start("chart-notes");
    plane.create_namespaces(&["driftguard"]);
    let pem = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let pem_set = format!("clientAuth.ca.pem={pem}");
    let install = |sets: &[&str]| {
        let mut cmd = Command::new(&helm);
        cmd.env("KUBECONFIG", plane.kubeconfig("admin"))
            .args(["install", "dg", &format!("{ROOT}/charts/driftguard")])
            .args(["--namespace", "driftguard", "--dry-run=server"]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (manifests, notes) = stdout.split_once("NOTES:").expect("notes printed");
        let network_policy = manifests.contains("kind: NetworkPolicy");
        (network_policy, notes.to_owned())
    };
    const WARNING: &str = "WARNING: any pod that can reach service dg-driftguard";

    let (network_policy, notes) = install(&[]);
    assert!(
        !network_policy,
        "a default install renders no NetworkPolicy"
    );
    assert!(notes.contains(WARNING), "{notes}");
    assert!(notes.contains("networkPolicy.webhookFrom"), "{notes}");
    assert!(notes.contains("clientAuth.enabled=true"), "{notes}");
    // What a failed pull means, and where the image comes from.
    assert!(
        notes.contains("ImagePullBackOff") && notes.contains("docs/install.md"),
        "{notes}"
    );
    // An enforcing install points at the audit-first path; an auditing one does not.
    assert!(notes.contains("driftguard report -"), "{notes}");
    let (_, notes) = install(&["policy.mode=audit"]);
    assert!(!notes.contains("driftguard report -"), "{notes}");

    let (network_policy, notes) =
        install(&["networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"]);
    assert!(
        network_policy,
        "webhookFrom alone renders the NetworkPolicy"
    );
    assert!(!notes.contains(WARNING), "{notes}");

    let (network_policy, notes) = install(&[
        "networkPolicy.enabled=false",
        "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
    ]);
    assert!(!network_policy, "turned off explicitly");
    assert!(notes.contains(WARNING), "{notes}");

    let (_, notes) = install(&[
        "clientAuth.enabled=true",
        &pem_set,
        "clientAuth.allowedNames={kube-apiserver-webhooks}",
    ]);
    assert!(!notes.contains(WARNING), "{notes}");
}

/// The values charts conventionally offer render where they belong, and a
/// misspelt key is refused instead of ignored.
#[test]
fn the_usual_values_render_and_a_typo_is_refused() {
    let helm = helm();
    let sets = [
        "fullnameOverride=guard",
        "priorityClassName=system-cluster-critical",
        "imagePullSecrets[0].name=regcred",
        "podAnnotations.team=platform",
        "extraArgs[0]=--decide-here-max-bytes=65536",
        "topologySpreadConstraints[0].maxSkew=1",
    ];
    let rendered = template(&helm, &sets, &[]);
    assert!(rendered.ok, "{}", rendered.stderr);
    let docs = documents(&rendered.yaml);
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["metadata"]["name"], "guard");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"]["team"], "platform");
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(pod["spec"]["topologySpreadConstraints"][0]["maxSkew"], 1);
    let args = pod["spec"]["containers"][0]["args"].as_array().unwrap();
    assert!(
        args.contains(&Value::from("--decide-here-max-bytes=65536")),
        "{args:?}"
    );
    // The default affinity spreads replicas; a value replaces it.
    assert!(pod["spec"]["affinity"]["podAntiAffinity"].is_object());
    let placed = template(&helm, &["affinity.nodeAffinity.x=1"], &[]);
    let placed = documents(&placed.yaml);
    let affinity = &find(&placed, "Deployment")["spec"]["template"]["spec"]["affinity"];
    assert!(affinity["podAntiAffinity"].is_null(), "{affinity}");
    for typo in [
        "server.maxConnection=3",
        "nameOveride=x",
        "extraArgs[0]=serve",
    ] {
        let refused = template(&helm, &[typo], &[]);
        assert!(!refused.ok, "{typo} was accepted");
    }
}

/// `helm test`'s pod runs `driftguard probe` against the Service with the CA
/// of the serving Secret: run here with the pod's own arguments against a
/// server serving that Secret's certificate, it passes. Where only the
/// apiserver may call, there is no test pod; it never poses as a replica.
#[test]
fn the_helm_test_probes_the_webhook_with_the_serving_secrets_ca() {
    let helm = helm();
    // The port is picked free, then released for the server: a parallel
    // test's process may take it meanwhile, so a server that exits is
    // started again on another.
    let probed = (0..3)
        .map(|_| helm_test_probe(&helm))
        .find(Result::is_ok)
        .unwrap_or_else(|| helm_test_probe(&helm));
    assert!(probed.unwrap().starts_with("ok: "));
    for closed in [
        &["networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"][..],
        &[
            "clientAuth.enabled=true",
            "clientAuth.ca.pem=x",
            "clientAuth.allowedNames[0]=kube-apiserver",
        ],
    ] {
        let rendered = template(&helm, closed, &[]);
        assert!(rendered.ok, "{closed:?}: {}", rendered.stderr);
        let docs = documents(&rendered.yaml);
        assert!(
            !docs.iter().any(|d| d["kind"] == "Pod"),
            "{closed:?}: a test pod where only the apiserver may call"
        );
    }
}

/// One run of the chart's helm test pod's command against a server serving
/// the rendered Secret's certificate: its output, or why the server exited.
fn helm_test_probe(helm: &PathBuf) -> Result<String, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let rendered = template(helm, &[&format!("webhook.url={url}")], &[]);
    assert!(rendered.ok, "{}", rendered.stderr);
    let docs = documents(&rendered.yaml);
    let pod = docs
        .iter()
        .find(|d| d["kind"] == "Pod")
        .expect("a helm test pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let selector = find(&docs, "Service")["spec"]["selector"]
        .as_object()
        .unwrap();
    let labels = &pod["metadata"]["labels"];
    assert!(
        selector.iter().any(|(k, v)| &labels[k] != v),
        "the Service would select the test pod: {labels}"
    );
    let spec = &pod["spec"];
    let secret = &spec["volumes"][0]["secret"];
    assert_eq!(secret["secretName"], "dg-driftguard-tls");
    assert_eq!(secret["items"][0]["key"], "ca.crt");
    let generated = rendered_generated(&docs, "dg-driftguard");
    let dir = std::env::temp_dir().join(format!("driftguard-helm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, pem) in [
        ("tls.crt", &generated.cert),
        ("tls.key", &generated.key),
        ("ca.crt", &generated.secret_bundle),
    ] {
        std::fs::write(dir.join(file), pem).unwrap();
    }
    let mut server = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(["serve", "--no-cluster", "--probe-listen=127.0.0.1:0"])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--tls-cert={}", dir.join("tls.crt").display()))
        .arg(format!("--tls-key={}", dir.join("tls.key").display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let args: Vec<String> = spec["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            a.replace("/tls/ca.crt", &dir.join("ca.crt").display().to_string())
        })
        .collect();
    assert_eq!(args[1], format!("--url={url}"));
    let probed = driftguard_testkit::process::poll(
        "the probe to pass",
        std::time::Duration::from_secs(30),
        || {
            if let Ok(Some(status)) = server.try_wait() {
                return Ok(Err(format!(
                    "the server exited ({status}): port {port} taken?"
                )));
            }
            let out = Command::new(env!("CARGO_BIN_EXE_driftguard"))
                .args(&args)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() {
                Ok(Ok(said))
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        },
    );
    let _ = server.kill();
    server.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    probed.unwrap()
}
