//! `driftguard check` and `policy lint` as a user runs them: real fixtures in,
//! the exact response bytes out, exit 2 with one line for every bad input.

use driftguard_testkit::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use driftguard::{Endpoint, Policy, judge};
use serde_json::{Value, json};

fn driftguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn check(args: &[&str]) -> (Value, Output) {
    let mut all = vec!["check", "--now", common::NOW];
    all.extend_from_slice(args);
    let out = driftguard(&all);
    let review: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    // Exit 0 allowed, 1 denied; stderr says which.
    let allowed = review["response"]["allowed"] == json!(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(if allowed { 0 } else { 1 }),
        "{args:?}: {stderr}"
    );
    let said = if allowed {
        "driftguard: allowed"
    } else {
        "driftguard: denied: "
    };
    assert!(stderr.contains(said), "{args:?}: {stderr}");
    (review, out)
}

fn stdin_check(body: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(["check", "--now", common::NOW, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn prints_exactly_the_bytes_the_webhook_sends() {
    let body = std::fs::read(format!(
        "{}/tests/data/deployment-update-image.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (answer, out) = check(&["tests/data/deployment-update-image.json"]);
    // The right answer on its own, so that a bug shared with judge() fails too.
    let r = &answer["response"];
    assert_eq!(
        r["uid"],
        json!("5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11"),
        "{answer}"
    );
    assert_eq!(r["allowed"], json!(false), "{answer}");
    assert_eq!(r["status"]["code"], json!(403), "{answer}");
    assert_eq!(r["auditAnnotations"]["reason"], json!("drift"), "{answer}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("drifts from Git at /spec/template/spec/containers/0/image"),
        "{answer}"
    );
    let expected = judge(
        &Policy::embedded(),
        &body,
        Endpoint::Validate,
        None,
        common::now(),
    )
    .unwrap()
    .to_json();
    assert_eq!(out.stdout, [expected.as_slice(), b"\n"].concat());
    // Stable across processes, although kube keeps auditAnnotations in a HashMap.
    let (_, again) = check(&["tests/data/deployment-update-image.json"]);
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn shipped_reviews_get_the_documented_answers() {
    let cases: [(&[&str], bool, &str); 7] = [
        (
            &["tests/data/deployment-update-image.json"],
            false,
            "/spec/template/spec/containers/0/image",
        ),
        (
            &["tests/data/deployment-update-image-dryrun.json"],
            false,
            "dry run",
        ),
        (
            &["tests/data/deployment-rollout-restart.json"],
            true,
            "no-drift",
        ),
        (
            &["tests/data/deployment-delete.json"],
            false,
            "delete (prune)",
        ),
        (
            &["tests/data/configmap-create.json"],
            false,
            "only Argo CD may create",
        ),
        (
            &[
                "--parent",
                "tests/data/deployment.json",
                "tests/data/deployment-scale.json",
            ],
            false,
            "/spec/replicas",
        ),
        (
            &[
                "--policy",
                "tests/data/seed/ignore-differences.yaml",
                "--parent",
                "tests/data/deployment.json",
                "tests/data/deployment-scale.json",
            ],
            true,
            "no-drift",
        ),
    ];
    for (args, allowed, needle) in cases {
        let (review, _) = check(args);
        let resp = &review["response"];
        assert_eq!(resp["uid"], json!("5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11"));
        assert_eq!(resp["allowed"], json!(allowed), "{args:?}");
        assert!(resp.to_string().contains(needle), "{args:?}: {resp}");
    }
}

#[test]
fn argocd_application_flag_names_the_source_repository() {
    let (review, _) = check(&[
        "--argocd-application",
        "tests/data/seed/argocd-application.yaml",
        "tests/data/deployment-update-image.json",
    ]);
    let msg = review["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("https://github.com/myorg/gitops-repo.git, path applications/myapp"),
        "{msg}"
    );
}

#[test]
fn every_seed_yaml_is_accepted_as_policy_input() {
    for file in [
        "argocd-application",
        "argocd-prune",
        "audit-policy",
        "flux-kustomization",
        "ignore-differences",
    ] {
        let path = format!("tests/data/seed/{file}.yaml");
        check(&["--policy", &path, "tests/data/deployment-update-image.json"]);
        let seed = common::repo_file(&path);
        // The seed article carries each file verbatim.
        assert!(
            common::repo_file("tests/data/seed/drift-remediation.txt").contains(seed.trim()),
            "{file}"
        );
    }
    check(&[
        "--argocd-application",
        "tests/data/seed/argocd-prune.yaml",
        "tests/data/deployment-update-image.json",
    ]);
}

#[test]
fn mutate_flag_answers_as_the_mutating_webhook() {
    let (review, _) = check(&["--mutate", "tests/data/deployment-update-image.json"]);
    assert_eq!(review["response"]["allowed"], json!(true));
    std::fs::write(
        format!("{}/warn-policy.yaml", env!("CARGO_TARGET_TMPDIR")),
        "mode: warn\n",
    )
    .unwrap();
    let (review, _) = check(&[
        "--policy",
        &format!("{}/warn-policy.yaml", env!("CARGO_TARGET_TMPDIR")),
        "--mutate",
        "tests/data/deployment-update-image.json",
    ]);
    assert_eq!(review["response"]["patchType"], json!("JSONPatch"));
}

#[test]
fn reads_standard_input() {
    let body = std::fs::read(format!(
        "{}/tests/data/deployment-delete.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let out = stdin_check(&body);
    assert_eq!(out.status.code(), Some(1), "denied: exit 1");
    let review: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(review["response"]["allowed"], json!(false));
}

#[test]
fn bad_inputs_exit_2_with_one_line_naming_the_problem() {
    let update_without_old = {
        let mut r: Value = serde_json::from_str(&common::repo_file(
            "tests/data/deployment-update-image.json",
        ))
        .unwrap();
        r["request"]["oldObject"] = Value::Null;
        r.to_string()
    };
    let no_uid = {
        let mut r: Value =
            serde_json::from_str(&common::repo_file("tests/data/deployment-delete.json")).unwrap();
        r["request"].as_object_mut().unwrap().remove("uid");
        r.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        ("{\"apiVersion\": ".into(), "not JSON"),
        ("[]".into(), "not an AdmissionReview"),
        (
            r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .into(),
            "admission.k8s.io/v1beta1",
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.into(),
            "no request",
        ),
        (no_uid, "no uid"),
        (update_without_old, "UPDATE request has no oldObject"),
        // A manifest where a review belongs: what check reads, and where to look.
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n".into(),
            "a Deployment, not an AdmissionReview",
        ),
        (
            r#"{"apiVersion":"v1","kind":"ConfigMap"}"#.into(),
            "examples: tests/data/*.json",
        ),
    ];
    for (body, needle) in cases {
        let out = stdin_check(body.as_bytes());
        assert_eq!(out.status.code(), Some(2), "{needle}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{needle}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = driftguard(&["check", "tests/data/no-such-review.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));

    let bad_policy = format!("{}/bad-policy.yaml", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        &bad_policy,
        "mode: enforce\nbreakGlass:\n  allowedGroup: [sre]\n",
    )
    .unwrap();
    let out = driftguard(&[
        "check",
        "--policy",
        &bad_policy,
        "tests/data/deployment-delete.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("bad-policy.yaml:3:3: unknown field `allowedGroup`"),
        "{err}"
    );
}

#[test]
fn upstream_admission_fixtures_are_judged() {
    // (file, expected allowed, with Argo CD tracking added to the objects)
    let cases = [
        ("kube-rs-pod-create-gke.json", true, false),
        ("kubewarden-policy-server-pod-create.json", true, false),
        (
            "kubewarden-echo-deployment-annotation-update.json",
            true,
            false,
        ),
        (
            "kubewarden-echo-deployment-annotation-update.json",
            false,
            true,
        ),
        ("kubewarden-echo-deployment-delete.json", false, true),
        ("kubewarden-pod-delete.json", true, false),
        ("kyverno-pod-delete.json", true, false),
        ("kyverno-pod-label-change-update.json", false, true),
        ("kyverno-pod-label-remove-update.json", false, true),
        ("kyverno-pod-noop-update.json", true, true),
        (
            "kyverno-pod-status-subresource-update-kubelet.json",
            true,
            true,
        ),
        (
            "kyverno-pod-status-subresource-update-kubelet-2.json",
            true,
            true,
        ),
        ("scale-subresource-docs-derived.json", true, false),
    ];
    let policy = Policy::embedded();
    for (file, allowed, track) in cases {
        let raw: Value = serde_json::from_str(&common::repo_file(&format!(
            "tests/data/upstream/admission/{file}"
        )))
        .unwrap();
        let mut review = if raw.get("apiVersion").is_some() {
            raw
        } else {
            let request = raw.get("request").cloned().unwrap_or(raw);
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
        };
        if track {
            for key in ["object", "oldObject"] {
                if let Some(meta) = review["request"][key].get_mut("metadata") {
                    meta["labels"]["app.kubernetes.io/instance"] = json!("myapp");
                }
            }
        }
        let judged = judge(
            &policy,
            review.to_string().as_bytes(),
            Endpoint::Validate,
            None,
            common::now(),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let resp = serde_json::to_value(&judged.response).unwrap();
        assert_eq!(
            resp["response"]["allowed"],
            json!(allowed),
            "{file} (tracked: {track}): {resp}"
        );
        assert_eq!(resp["response"]["uid"], review["request"]["uid"], "{file}");
        if file == "kubewarden-echo-deployment-annotation-update.json" && track {
            // generation and managedFields changed too; only the user's annotation is drift.
            let paths = &judged.decision.drifted_paths;
            assert!(
                paths
                    .iter()
                    .all(|p| p.starts_with("/metadata/annotations/")),
                "{paths:?}"
            );
        }
        if file == "kyverno-pod-label-change-update.json" {
            // A `kubectl apply`: it rewrote the last-applied record too, which
            // Argo CD's next client-side sync merges against.
            assert_eq!(
                judged.decision.drifted_paths,
                vec![
                    "/metadata/labels/something",
                    "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"
                ]
            );
        }
    }
}

#[test]
fn policy_lint_flags_the_seed_jq_and_prints_the_rewrite() {
    let out = driftguard(&["policy", "lint", "tests/data/seed/ignore-differences.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(r#"use: .metadata.labels | select(. != null) | .[keys[] | select(startswith("service.istio.io"))]"#), "{text}");
    assert!(text.contains("ignore-differences.yaml:28:"), "{text}");
    for ok in [
        "argocd-application",
        "argocd-prune",
        "audit-policy",
        "flux-kustomization",
    ] {
        let out = driftguard(&["policy", "lint", &format!("tests/data/seed/{ok}.yaml")]);
        assert!(
            out.status.success(),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Issue 48: `policy lint` printed `ok` for a policy with a top-level `kind:`
/// (the server then put the embedded default in force) and for an empty
/// tracking annotation (every annotation-tracked object unmanaged).
#[test]
fn policy_lint_fails_on_a_kind_and_on_an_empty_tracking_annotation() {
    for (name, text, problem) in [
        (
            "kind-policy.yaml",
            "kind: DriftguardPolicy\nmode: enforce\nnamespaces: [{names: [dev-payments], mode: enforce}]\n",
            "kind `DriftguardPolicy` is not a driftguard policy",
        ),
        (
            "empty-annotation.yaml",
            "gitops:\n  argocd:\n    trackingAnnotation: \"\"\n",
            "gitops.argocd.trackingAnnotation: is empty",
        ),
        (
            "every-account.yaml",
            "trusted:\n  groups: [system:serviceaccounts]\n",
            "trusted.groups: `system:serviceaccounts` matches group",
        ),
    ] {
        let path = format!("{}/{name}", env!("CARGO_TARGET_TMPDIR"));
        std::fs::write(&path, text).unwrap();
        let out = driftguard(&["policy", "lint", &path]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        assert!(
            stdout.starts_with(&format!("problem: {path}: ")) && stdout.contains(problem),
            "{name}: {stdout}"
        );
        assert!(!stdout.contains("ok:"), "{name}: {stdout}");
    }
}

#[test]
fn a_runaway_jq_rule_exits_2_at_the_decision_deadline() {
    // Only `.`, `,`, `|` and `select`, yet 2^30 paths: minutes without a deadline.
    let expr = "(.,.)|".repeat(30) + "select(false)";
    let policy = format!("{}/runaway-policy.yaml", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        &policy,
        format!(
            "mode: enforce\nignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jqPathExpressions:\n      - {}\n",
            serde_json::to_string(&expr).unwrap()
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = driftguard(&[
        "check",
        "--decision-timeout",
        "200ms",
        "--policy",
        &policy,
        "tests/data/deployment-update-image.json",
    ]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "driftguard: tests/data/deployment-update-image.json: the decision exceeded its deadline of 200ms (--decision-timeout); a jq ignore rule is probably too slow\n"
    );

    for bad in ["0s", "30s", "soon"] {
        let out = driftguard(&[
            "check",
            "--decision-timeout",
            bad,
            "tests/data/deployment-delete.json",
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("--decision-timeout"), "{bad}: {err}");
    }
}

/// Runs the binary, failing the test instead of hanging if it does not exit in time.
fn driftguard_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("driftguard {args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_runaway_jq_expression_is_refused_at_load_with_its_position() {
    let policy = format!("{}/runaway-jq-policy.yaml", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        &policy,
        "mode: enforce\nignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jqPathExpressions:\n      - last(range(1e12)) as $x | .spec\n",
    )
    .unwrap();
    let reason = format!(
        "{policy}:6:14: ignoreDifferences[0].jqPathExpressions[0]: `range` is not allowed: \
         it can run without bound (allowed: field access, [], |, ',', select(...), comparisons, \
         keys, has, test, ...)"
    );
    let limit = std::time::Duration::from_secs(10);

    let out = driftguard_within(&["policy", "lint", &policy], limit);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("problem: {reason}\n")
    );

    let out = driftguard_within(
        &[
            "check",
            "--policy",
            &policy,
            "tests/data/deployment-update-image.json",
        ],
        limit,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(&reason), "{err}");

    // The same check applies to the rules of an Argo CD Application.
    let app = format!("{}/runaway-jq-app.yaml", env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        &app,
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: web}\nspec:\n  ignoreDifferences:\n    - kind: Deployment\n      jqPathExpressions: [\"until(false; .)\"]\n",
    )
    .unwrap();
    let out = driftguard_within(
        &[
            "check",
            "--argocd-application",
            &app,
            "tests/data/deployment-update-image.json",
        ],
        limit,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "{app}:7:28: Application web ignoreDifferences[0].jqPathExpressions[0]: `until` is not allowed"
        )),
        "{err}"
    );
}

/// Every shipped review without a subresource, rebuilt from its objects and
/// writer by `--old`/`--new`/`--user`/`--group`, gets the same answer as the
/// apiserver's own review: the builder is the same write, not an approximation.
#[test]
fn a_review_built_from_manifests_is_judged_as_the_apiservers() {
    let dir = std::env::temp_dir().join(format!("driftguard-built-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = format!("{}/tests/data", env!("CARGO_MANIFEST_DIR"));
    let mut judged = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        let Ok(review) = serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap_or_default())
        else {
            continue;
        };
        let request = &review["request"];
        if review["kind"] != "AdmissionReview"
            || request.get("subResource").is_some()
            || request["operation"] == "CONNECT"
        {
            continue;
        }
        let mut args: Vec<String> = vec!["-o".into(), "json".into()];
        for (field, flag) in [("oldObject", "--old"), ("object", "--new")] {
            if request[field].is_object() {
                let file = dir.join(format!("{field}.json"));
                std::fs::write(&file, request[field].to_string()).unwrap();
                args.extend([flag.into(), file.display().to_string()]);
            }
        }
        let user = &request["userInfo"];
        args.extend(["--user".into(), user["username"].as_str().unwrap().into()]);
        for group in user["groups"].as_array().into_iter().flatten() {
            args.extend(["--group".into(), group.as_str().unwrap().into()]);
        }
        if request["dryRun"] == true {
            args.push("--dry-run".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (built, _) = check(&args);
        let (given, _) = check(&[path.to_str().unwrap()]);
        let answer = |r: &Value| {
            let r = &r["response"];
            (
                r["allowed"].clone(),
                r["status"].clone(),
                r["warnings"].clone(),
                r["auditAnnotations"].clone(),
            )
        };
        assert_eq!(answer(&built), answer(&given), "{}", path.display());
        judged += 1;
    }
    assert!(judged >= 5, "only {judged} reviews rebuilt");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn text_and_yaml_say_what_json_says() {
    let review = "tests/data/deployment-update-image.json";
    let (json, _) = check(&[review]);
    let text = driftguard(&["check", "--now", common::NOW, "-o", "text", review]);
    assert_eq!(text.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&text.stdout);
    let message = json["response"]["status"]["message"].as_str().unwrap();
    assert!(
        stdout.starts_with("driftguard: denied: ")
            && stdout.contains(message.trim_start_matches("driftguard: ")),
        "{stdout}"
    );
    assert!(text.stderr.is_empty(), "text goes to stdout only");
    let yaml = driftguard(&["check", "--now", common::NOW, "-o", "yaml", review]);
    assert_eq!(yaml.status.code(), Some(1));
    let parsed: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&yaml.stdout)).unwrap();
    assert_eq!(parsed, json);
}

/// `register --check --from -`, as a CI pipeline runs it on `helm template`'s
/// or `register --dry-run`'s output: 0 when the webhooks match the policy,
/// 1 with the difference and the fix when a ConfigMap stopped trusting what
/// the webhooks still skip.
#[test]
fn register_check_exits_1_when_the_webhooks_skip_what_the_policy_judges() {
    let dir = tempdir();
    let narrower = dir.join("policy.yaml");
    std::fs::write(&narrower, "trusted:\n  users: [alice]\n").unwrap();
    let rendered = driftguard(&[
        "register",
        "--url",
        "https://127.0.0.1:8443",
        "--ca-bundle",
        "/dev/null",
        "--dry-run",
    ]);
    assert!(rendered.status.success());
    let check = |extra: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_driftguard"))
            .args(["register", "--check", "--from", "-"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&rendered.stdout)
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let same = check(&[]);
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    let differs = check(&["--policy", narrower.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&differs.stdout);
    assert_eq!(differs.status.code(), Some(1), "{out}");
    assert!(
        out.contains("skips: UPDATE by `system:serviceaccount:kube-system:x`"),
        "{out}"
    );
    assert!(
        out.contains("fix: render the webhooks from the policy in force"),
        "{out}"
    );
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("driftguard-check-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
