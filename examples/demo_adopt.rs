//! `scripts/demo.sh --adopt`: the adoption path on a real control plane.
//! driftguard in audit mode records what enforce would deny and refuses
//! nothing; `driftguard report` turns those records into the objects, users
//! and paths to settle; then the policy says enforce and the same edit is
//! denied. Commands are echoed as they run.

use driftguard_testkit::control_plane;

use control_plane::*;

fn say(text: &str) {
    println!("\n### {text}");
}

fn set_mode(policy: &std::path::Path, mode: &str) {
    let base = std::fs::read_to_string(format!("{ROOT}/tests/data/e2e-policy.yaml")).unwrap();
    std::fs::write(policy, format!("mode: {mode}\n{base}")).unwrap();
}

fn main() {
    say("starting etcd and kube-apiserver (built from the Go module proxy), then driftguard");
    let mut plane = ControlPlane::start("adopt");
    plane.add_user("driftguard", &[]);
    plane.add_user("bob", &["developers"]);
    for ns in ["argocd", "production"] {
        assert!(plane.kubectl("admin", &["create", "namespace", ns]).ok);
    }
    plane.apply_admin(RBAC);
    plane.apply_admin(CONTROLLER_RBAC);
    plane.apply_admin(DRIFTGUARD_RBAC);
    let dir = std::env::temp_dir().join(format!("driftguard-adopt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    set_mode(&policy, "audit");
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &format!("--kubeconfig={}", plane.kubeconfig("driftguard").display()),
            "--reload-interval=1s",
        ],
    );
    dg.register(&plane, &policy.display().to_string());
    assert!(
        plane
            .kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(MYAPP_DEPLOYMENT))
            .ok
    );
    plane.echo = true;
    let edit = ["-n", "production", "set", "image", "deployment/myapp"];

    say("1. audit (policy mode: audit): hand edits of a managed Deployment pass, and are recorded");
    plane.kubectl("alice", &[&edit[..], &["app=nginx:1.28"]].concat());
    plane.kubectl(
        "bob",
        &[
            "-n",
            "production",
            "annotate",
            "deployment/myapp",
            "owner=bob",
        ],
    );
    plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "scale",
            "deployment/myapp",
            "--replicas=4",
        ],
    );
    plane.kubectl("bob", &[&edit[..], &["app=nginx:1.29"]].concat());

    say("2. report: what enforce would have denied, from driftguard's audit records");
    let records = dir.join("records.jsonl");
    let lines: Vec<String> = dg.audit().iter().map(ToString::to_string).collect();
    std::fs::write(&records, lines.join("\n")).unwrap();
    // In a cluster: kubectl driftguard report --since 168h (every replica's log).
    println!("\n$ driftguard report records.jsonl    # driftguard serve's audit lines (stdout)");
    let report = std::process::Command::new(Driftguard::binary())
        .args(["report", &records.display().to_string()])
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&report.stdout));
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );

    say("3. enforce (policy mode: enforce; driftguard reloads the file, no restart)");
    set_mode(&policy, "enforce");
    plane.echo = false;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while plane
        .kubectl(
            "alice",
            &[&edit[..], &["app=nginx:1.30", "--dry-run=server"]].concat(),
        )
        .ok
    {
        assert!(
            std::time::Instant::now() < deadline,
            "enforce never took effect"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    plane.echo = true;
    plane.kubectl("alice", &[&edit[..], &["app=nginx:1.30"]].concat());
    std::fs::remove_dir_all(&dir).ok();
    say("done; everything is torn down");
}
