//! The real server binary over real TLS on 127.0.0.1, with real clients:
//! HTTP/1.1 keep-alive and HTTP/2, client certificates, certificate rotation
//! mid-traffic, an expired certificate (unready, measured, logged), policy
//! reload, SIGTERM with a review in flight, a slow client,
//! kept-alive connections that outlive the header timeout, and one audit line
//! per decided review.

use driftguard_testkit::process;

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use driftguard::certs::Authority;
use process::*;
use reqwest::Version;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

const REVIEW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/deployment-update-image.json"
);
/// The uid in `REVIEW`.
const UID: &str = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `tls.crt`/`tls.key` for 127.0.0.1 signed by `ca`, replacing the
/// files by rename as a Secret volume update does.
fn write_pair(ca: &Authority, dir: &Path, cn: &str) {
    let (cert, key) = ca
        .leaf(cn, &["127.0.0.1".into(), "localhost".into()], &[])
        .unwrap();
    for (name, pem) in [("tls.crt", cert), ("tls.key", key)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// The server on a webhook port it picked itself and a probe port picked
/// here (see `serve_driftguard`).
struct Server(Served);

impl Deref for Server {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.0
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut Served {
        &mut self.0
    }
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let binary = Path::new(env!("CARGO_BIN_EXE_driftguard"));
        Server(serve_driftguard(binary, 0, &Self::args(dir, extra)))
    }

    /// Started without waiting for `/readyz` to say ready.
    fn start_unready(dir: &Path, extra: &[&str]) -> Server {
        let binary = Path::new(env!("CARGO_BIN_EXE_driftguard"));
        Server(serve_driftguard_unready(binary, 0, &Self::args(dir, extra)))
    }

    fn args(dir: &Path, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            format!("--tls-cert={}", dir.join("tls.crt").display()),
            format!("--tls-key={}", dir.join("tls.key").display()),
            "--reload-interval=100ms".into(),
            "--no-cluster".into(),
        ];
        if !extra.iter().any(|a| a.starts_with("--shutdown-delay")) {
            args.push("--shutdown-delay=300ms".into());
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// Waits for /readyz to say 503, as it does at once after SIGTERM.
    async fn wait_unready(&self) {
        wait_for_async(
            "/readyz 503 after SIGTERM",
            Duration::from_secs(2),
            move || async move {
                match self.probe_get("/readyz") {
                    (503, _) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    fn metric(&self, needle: &str) -> f64 {
        let (_, body) = self.probe_get("/metrics");
        body.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// Polls until `metric` is at least `at_least`.
    async fn wait_for_metric(&self, what: &str, metric: &str, at_least: f64) {
        wait_for_async(what, Duration::from_secs(10), move || async move {
            match self.metric(metric) {
                v if v >= at_least => Ok(()),
                v => Err(format!("{metric} = {v}")),
            }
        })
        .await
    }

    fn stderr(&self) -> String {
        self.proc.stderr_text()
    }
}

fn tls_config(
    ca_pem: &str,
    identity: Option<&(String, String)>,
    alpn: &[&[u8]],
    tls12_only: bool,
) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

fn client(
    ca_pem: &str,
    identity: Option<&(String, String)>,
    h2: bool,
    fresh_connections: bool,
) -> reqwest::Client {
    let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[b"http/1.1"] };
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(ca_pem, identity, alpn, false))
        .tls_info(true)
        .timeout(Duration::from_secs(10));
    builder = if h2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    if fresh_connections {
        builder = builder.pool_max_idle_per_host(0);
    }
    builder.build().unwrap()
}

async fn review(
    client: &reqwest::Client,
    server: &Server,
) -> reqwest::Result<(Version, Value, Vec<u8>)> {
    let resp = client
        .post(server.url("/validate"))
        .body(std::fs::read(REVIEW).unwrap())
        .send()
        .await?;
    let version = resp.version();
    let peer = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate().map(<[u8]>::to_vec))
        .unwrap_or_default();
    Ok((version, resp.json().await?, peer))
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_http1_keep_alive_and_http2_and_tls12() {
    let dir = scratch("versions");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let server = Server::start(&dir, &[]);
    let h1 = client(&ca.cert_pem, None, false, false);
    for _ in 0..10 {
        let (version, body, _) = review(&h1, &server).await.unwrap();
        assert_eq!(version, Version::HTTP_11);
        assert_eq!(body["response"]["allowed"], false);
    }
    let h2 = client(&ca.cert_pem, None, true, false);
    let (version, body, _) = review(&h2, &server).await.unwrap();
    assert_eq!(version, Version::HTTP_2);
    assert_eq!(body["response"]["uid"], UID);

    let tls12 = reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(&ca.cert_pem, None, &[b"http/1.1"], true))
        .build()
        .unwrap();
    let resp = tls12
        .post(server.url("/validate"))
        .body(std::fs::read(REVIEW).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_are_required_when_a_client_ca_is_given() {
    let dir = scratch("mtls");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let apiserver_ca = Authority::new("apiserver client CA").unwrap();
    std::fs::write(dir.join("client-ca.crt"), &apiserver_ca.cert_pem).unwrap();
    let server = Server::start(
        &dir,
        &[
            "--client-ca",
            &dir.join("client-ca.crt").display().to_string(),
        ],
    );

    let good = apiserver_ca.leaf("kube-apiserver", &[], &[]).unwrap();
    assert!(
        review(&client(&ca.cert_pem, Some(&good), false, true), &server)
            .await
            .is_ok()
    );
    assert!(
        review(&client(&ca.cert_pem, None, false, true), &server)
            .await
            .is_err(),
        "no client certificate"
    );
    let stranger = Authority::new("someone else")
        .unwrap()
        .leaf("mallory", &[], &[])
        .unwrap();
    assert!(
        review(&client(&ca.cert_pem, Some(&stranger), false, true), &server)
            .await
            .is_err(),
        "foreign CA"
    );
}

/// With --client-name, a certificate from the client CA gets in only if its
/// CN or a DNS name is allowed: the cluster CA signs users too.
#[tokio::test(flavor = "multi_thread")]
async fn only_allowed_client_names_get_in() {
    let dir = scratch("mtls-names");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let cluster_ca = Authority::new("cluster CA").unwrap();
    std::fs::write(dir.join("client-ca.crt"), &cluster_ca.cert_pem).unwrap();
    let server = Server::start(
        &dir,
        &[
            "--client-ca",
            &dir.join("client-ca.crt").display().to_string(),
            "--client-name=kube-apiserver",
            "--client-name=webhooks.apiserver.example",
        ],
    );
    let by_cn = cluster_ca.leaf("kube-apiserver", &[], &[]).unwrap();
    let by_dns = cluster_ca
        .leaf("apiserver-1", &["webhooks.apiserver.example".into()], &[])
        .unwrap();
    for (what, identity) in [("CN", &by_cn), ("DNS name", &by_dns)] {
        let sent = review(&client(&ca.cert_pem, Some(identity), false, true), &server).await;
        assert!(sent.is_ok(), "allowed by {what}: {sent:?}");
    }
    let user = cluster_ca.leaf("alice", &[], &["system:masters"]).unwrap();
    for h2 in [false, true] {
        assert!(
            review(&client(&ca.cert_pem, Some(&user), h2, true), &server)
                .await
                .is_err(),
            "a user's certificate from the same CA"
        );
    }
    assert_eq!(
        server.metric("driftguard_clients_refused_total{reason=\"name_not_allowed\"}"),
        2.0
    );
    let decided: f64 = server
        .probe_get("/metrics")
        .1
        .lines()
        .filter(|l| l.starts_with("driftguard_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        decided, 2.0,
        "only the allowed clients' reviews were decided"
    );
    assert!(
        server
            .proc
            .stderr_text()
            .contains("refused a webhook client")
    );
}

/// A name without a CA would check nothing: serve refuses to start.
#[test]
fn a_client_name_without_a_client_ca_is_refused_at_startup() {
    let dir = scratch("names-without-ca");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(["serve", "--no-cluster", "--client-name=kube-apiserver"])
        .arg(format!("--tls-cert={}", dir.join("tls.crt").display()))
        .arg(format!("--tls-key={}", dir.join("tls.key").display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--client-ca"), "{stderr}");
}

/// Issue 48: a policy the server's flags cannot carry out is refused at
/// startup, naming the flag (a reload is refused alike: `server::reload`).
#[test]
fn a_policy_the_flags_cannot_carry_is_refused_at_startup() {
    let dir = scratch("policy-flags");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let serve = |policy: &str, extra: &[&str]| {
        let path = dir.join("policy.yaml");
        std::fs::write(&path, policy).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_driftguard"))
            .args([
                "serve",
                "--listen=127.0.0.1:0",
                "--probe-listen=127.0.0.1:0",
            ])
            .arg(format!("--tls-cert={}", dir.join("tls.crt").display()))
            .arg(format!("--tls-key={}", dir.join("tls.key").display()))
            .arg(format!("--policy={}", path.display()))
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A server that starts never exits by itself: stop it and fail.
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("serve started with {policy:?} {extra:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{policy} {extra:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = serve(
        "{}\n",
        &["--no-cluster", "--argocd-namespace=openshift-gitops"],
    );
    assert!(
        stderr.contains("namespace `openshift-gitops`, where Argo CD runs (--argocd-namespace)"),
        "{stderr}"
    );
    let glass = "breakGlass: {allowedGroups: [sre-oncall]}\n";
    let stderr = serve(glass, &["--no-cluster"]);
    assert!(
        stderr.contains("no expiry sweeper runs (--no-cluster)"),
        "{stderr}"
    );
    let stderr = serve(
        glass,
        &[
            "--kubeconfig=/nonexistent",
            "--break-glass-sweep-interval=0",
        ],
    );
    assert!(
        stderr.contains("no expiry sweeper runs (--break-glass-sweep-interval=0)"),
        "{stderr}"
    );
    let stderr = serve("kind: DriftguardPolicy\nmode: enforce\n", &["--no-cluster"]);
    assert!(stderr.contains("is not a driftguard policy"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn certificate_rotation_mid_traffic_fails_no_request() {
    let dir = scratch("rotation");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "first");
    let server = Arc::new(Server::start(&dir, &[]));
    let http = client(&ca.cert_pem, None, false, true);
    let first_cert = served_certificate(&ca.cert_pem, server.port).await;

    let sent = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut traffic = Vec::new();
    for _ in 0..4 {
        let (http, server, sent, failures, done) = (
            http.clone(),
            server.clone(),
            sent.clone(),
            failures.clone(),
            done.clone(),
        );
        traffic.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                match review(&http, &server).await {
                    Ok((_, body, _)) if body["response"]["uid"] == UID => {}
                    _ => {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // `at_least` more requests answered (or failed) than now.
    let more_requests = |what: &'static str, more: usize| {
        let (sent, at_least) = (sent.clone(), sent.load(Ordering::SeqCst) + more);
        wait_for_async(what, Duration::from_secs(10), move || {
            let sent = sent.load(Ordering::SeqCst);
            async move {
                if sent >= at_least {
                    Ok(())
                } else {
                    Err(format!("{sent} requests"))
                }
            }
        })
    };
    more_requests("traffic before the rotation", 12).await;
    write_pair(&ca, &dir, "second");
    wait_for_async(
        "the new certificate to be served",
        Duration::from_secs(10),
        || {
            let (pem, port, first) = (ca.cert_pem.clone(), server.port, first_cert.clone());
            async move {
                if served_certificate(&pem, port).await == first {
                    Err("still the first certificate".to_owned())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await;
    // A broken pair is refused; the second pair keeps serving.
    std::fs::write(
        dir.join("tls.crt"),
        "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    server
        .wait_for_metric(
            "the broken pair to be refused",
            "driftguard_certificate_reloads_total{result=\"failure\"}",
            1.0,
        )
        .await;
    more_requests("traffic after the broken pair was refused", 12).await;
    done.store(true, Ordering::SeqCst);
    for t in traffic {
        t.await.unwrap();
    }
    let sent = sent.load(Ordering::SeqCst);
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "{sent} requests, some failed"
    );
    assert!(sent > 20, "only {sent} requests during the rotation");
    assert_ne!(
        served_certificate(&ca.cert_pem, server.port).await,
        first_cert
    );
    assert!(server.stderr().contains("new certificate pair refused"));
}

/// The finding of issue 48: a serving certificate that expired in 2021 made
/// /readyz say 200, with nothing logged and no metric. Now the replica is
/// unready and says why, the gauge holds each notAfter, the log has an error
/// for the serving certificate and a warning for a client CA with 5 days
/// left; a renewed pair, read without a restart, makes it ready.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_serving_certificate_is_measured_logged_and_unready() {
    use driftguard::certs::expiry::{Validity, now};
    let dir = scratch("expired");
    let ca = Authority::new("test CA").unwrap();
    // 2020-01-01 to 2021-06-01.
    let expired = Validity {
        not_before: 1_577_836_800,
        not_after: 1_622_505_600,
    };
    let (cert, key) = ca
        .leaf_valid("server", &["127.0.0.1".into()], &[], expired)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let client_ca_expiry = now() + 5 * 86_400 + 3600;
    let client_ca = Authority::new_valid(
        "apiserver client CA",
        Validity {
            not_before: now() - 86_400,
            not_after: client_ca_expiry,
        },
    )
    .unwrap();
    std::fs::write(dir.join("client-ca.crt"), &client_ca.cert_pem).unwrap();
    let client_ca_flag = format!("--client-ca={}", dir.join("client-ca.crt").display());
    let server = Server::start_unready(&dir, &[&client_ca_flag]);

    let server_ref = &server;
    let why = wait_for_async("/readyz 503", Duration::from_secs(10), move || async move {
        match server_ref.probe_get("/readyz") {
            (503, body) if body.contains("serving certificate") => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        why.starts_with("not ready: the serving certificate expired ")
            && why.contains("to 2021-06-01T00:00:00Z): the apiserver refuses it"),
        "{why}"
    );
    assert_eq!(
        server.probe_get("/healthz").0,
        200,
        "alive: a restart renews nothing"
    );
    let gauge = "driftguard_certificate_expiry_timestamp_seconds";
    assert_eq!(
        server.metric(&format!("{gauge}{{certificate=\"serving\"}}")),
        expired.not_after as f64
    );
    assert_eq!(
        server.metric(&format!("{gauge}{{certificate=\"client-ca\"}}")),
        client_ca_expiry as f64
    );
    let log = server.stderr();
    let line = |needle: &str| log.lines().find(|l| l.contains(needle)).map(str::to_owned);
    let serving = line("the serving certificate expired").unwrap_or_else(|| panic!("{log}"));
    assert!(serving.contains("ERROR"), "{serving}");
    let soon =
        line("the client-ca certificate expires in 5 days").unwrap_or_else(|| panic!("{log}"));
    assert!(soon.contains("WARN"), "{soon}");
    assert!(!log.contains("PRIVATE KEY"), "{log}");

    write_pair(&ca, &dir, "renewed");
    server.wait_ready();
    assert!(server.metric(&format!("{gauge}{{certificate=\"serving\"}}")) > now() as f64);
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_reload_takes_good_policies_and_keeps_the_last_good_one() {
    let dir = scratch("policy");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "mode: enforce\n").unwrap();
    let server = Server::start(&dir, &["--policy", &policy.display().to_string()]);
    let http = client(&ca.cert_pem, None, false, false);
    assert_eq!(
        review(&http, &server).await.unwrap().1["response"]["allowed"],
        false
    );

    std::fs::write(&policy, "mode: warn\n").unwrap();
    let (http_ref, server_ref) = (&http, &server);
    wait_for_async(
        "the good policy to be loaded",
        Duration::from_secs(10),
        move || async move {
            let answer = review(http_ref, server_ref).await.unwrap().1;
            if answer["response"]["allowed"] == true {
                Ok(())
            } else {
                Err(answer.to_string())
            }
        },
    )
    .await;
    std::fs::write(&policy, "mode: warn\nbreakGlass:\n  allowedGroup: [sre]\n").unwrap();
    server
        .wait_for_metric(
            "the bad policy to be refused",
            "driftguard_policy_reloads_total{result=\"failure\"}",
            1.0,
        )
        .await;
    assert_eq!(
        review(&http, &server).await.unwrap().1["response"]["allowed"],
        true,
        "last good policy stays"
    );
    assert_eq!(server.probe_get("/readyz").0, 200);
    let log = server.stderr();
    assert!(
        log.contains("policy.yaml:3:3: unknown field `allowedGroup`"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_review_in_flight_finish_and_exits_zero() {
    let dir = scratch("sigterm");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let mut server = Server::start(&dir, &[]);
    let http = client(&ca.cert_pem, None, false, false);
    let body = std::fs::read(REVIEW).unwrap();
    // One slot: the second half waits until the request has taken the first,
    // which it does once its connection is up.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let stream = futures_channel(rx);
    let url = server.url("/validate");
    let in_flight = tokio::spawn(async move {
        http.post(url)
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await
    });
    let half = body.len() / 2;
    tx.send(Ok(body[..half].to_vec())).await.unwrap();
    let second_half = tokio::time::timeout(Duration::from_secs(10), tx.reserve())
        .await
        .expect("the request never took the first half of its body")
        .unwrap();

    server.proc.terminate();
    let server_ref = &server;
    server_ref.wait_unready().await;
    // Past the shutdown delay: no longer accepting, but the review in flight completes.
    let stopped = wait_for_async(
        "the server to stop accepting",
        Duration::from_secs(10),
        move || async move {
            server_ref
                .proc
                .stderr_line("no longer accepting")
                .ok_or_else(|| server_ref.proc.stderr_tail(5))
        },
    )
    .await;
    assert!(stopped.ends_with("connections=1"), "{stopped}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", server.port)).is_err(),
        "still accepting: {stopped}"
    );
    second_half.send(Ok(body[half..].to_vec()));
    drop(tx);
    let resp = in_flight
        .await
        .unwrap()
        .expect("the review in flight completes");
    assert_eq!(resp.status(), 200);
    let value: Value = resp.json().await.unwrap();
    assert_eq!(value["response"]["allowed"], false);
    let status = server.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

/// The leaf certificate a fresh handshake gets.
async fn served_certificate(ca_pem: &str, port: u16) -> Vec<u8> {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca_pem, None, &[b"http/1.1"], false)));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let tls = connector
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// Fails unless the server closes `stream` (or answers 408) within `within`.
async fn expect_cut_off(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
    what: &str,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let cut = tokio::time::timeout(within, stream.read(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("{what}: not cut off within {within:?}"));
    assert!(
        matches!(cut, Ok(0) | Err(_)) || String::from_utf8_lossy(&buf).contains("408"),
        "{what}: {cut:?}"
    );
}

/// A `Stream` over an mpsc receiver, for a body sent in pieces.
fn futures_channel(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_client_is_cut_off_while_others_are_served() {
    use tokio::io::AsyncWriteExt;
    let dir = scratch("slow");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let server = Server::start(
        &dir,
        &["--header-timeout", "500ms", "--handshake-timeout", "500ms"],
    );

    // Headers that never end.
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(
        &ca.cert_pem,
        None,
        &[b"http/1.1"],
        false,
    )));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let mut slow = connector
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    slow.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // A TLS handshake that never starts.
    let mut silent = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();

    let started = Instant::now();
    let http = client(&ca.cert_pem, None, false, true);
    for _ in 0..5 {
        assert!(review(&http, &server).await.is_ok());
    }
    expect_cut_off(&mut slow, Duration::from_secs(5), "slow client").await;
    expect_cut_off(&mut silent, Duration::from_secs(5), "silent client").await;
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_audit_line_per_decided_review() {
    let dir = scratch("audit");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let mut server = Server::start(&dir, &[]);
    let http = client(&ca.cert_pem, None, false, false);
    for _ in 0..7 {
        review(&http, &server).await.unwrap();
    }
    // Refused before a decision: no audit record.
    let resp = http
        .post(server.url("/validate"))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = http
        .post(server.url("/mutate"))
        .body(std::fs::read(REVIEW).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.proc.terminate();
    // Exited, and its output read to the end.
    assert!(server.proc.wait_exit(Duration::from_secs(10)).success());
    let lines = server.proc.stdout.lock().unwrap().clone();
    assert_eq!(lines.len(), 8, "{lines:#?}");
    let fields = [
        "time",
        "endpoint",
        "uid",
        "user",
        "groups",
        "operation",
        "group",
        "version",
        "kind",
        "resource",
        "subResource",
        "namespace",
        "name",
        "manager",
        "mode",
        "verdict",
        "driftedPaths",
        "breakGlass",
        "dryRun",
        "latencyMicros",
        "parseMicros",
        "error",
    ];
    for line in &lines {
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for f in fields {
            assert!(record.get(f).is_some(), "{f} missing in {line}");
        }
        assert_eq!(record["user"], "alice");
        // The parse is part of the whole.
        assert!(
            record["parseMicros"].as_u64() <= record["latencyMicros"].as_u64(),
            "{line}"
        );
    }
    let endpoint = |e: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!("\"endpoint\":\"{e}\"")))
            .count()
    };
    assert_eq!((endpoint("validate"), endpoint("mutate")), (7, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn while_draining_http1_answers_close_their_connection() {
    let dir = scratch("draining");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let mut server = Server::start(&dir, &["--shutdown-delay=5s"]);
    let http = client(&ca.cert_pem, None, false, false);
    let body = std::fs::read(REVIEW).unwrap();
    let connection = |r: &reqwest::Response| {
        r.headers()
            .get("connection")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let before = http
        .post(server.url("/validate"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(before.status(), 200);
    assert_eq!(connection(&before), None, "keep-alive while serving");

    server.proc.terminate();
    server.wait_unready().await;
    let draining = http
        .post(server.url("/validate"))
        .body(body)
        .send()
        .await
        .expect("still served during the shutdown delay");
    assert_eq!(draining.status(), 200);
    assert_eq!(connection(&draining).as_deref(), Some("close"));
    let status = server.proc.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
}

/// Reads one HTTP/1.1 response (headers and a Content-Length body) from
/// `stream`: (status, body), or why not.
async fn read_response(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<(u16, String), String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .ok_or_else(|| format!("no Content-Length in {head:?}"))?;
            if body.len() >= length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("no status in {head:?}"))?;
                return Ok((status, body.to_owned()));
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) => return Err(format!("closed after {} bytes", got.len())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// The apiserver keeps idle HTTP/1.1 connections for 90 s and does not
/// retry a review whose connection the server closed under it: an idle
/// kept-alive connection must outlive --header-timeout and close only after
/// --idle-timeout, while the first request's headers stay bounded by
/// --header-timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_alive_connection_outlives_the_header_timeout_until_the_idle_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = scratch("idle");
    let ca = Authority::new("test CA").unwrap();
    write_pair(&ca, &dir, "server");
    let server = Server::start(&dir, &["--header-timeout=1s", "--idle-timeout=6s"]);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(
        &ca.cert_pem,
        None,
        &[b"http/1.1"],
        false,
    )));
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        connector
            .connect("127.0.0.1".try_into().unwrap(), tcp)
            .await
            .unwrap()
    };
    let body = std::fs::read(REVIEW).unwrap();
    let mut request = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);

    let mut kept = connect().await;
    for round in 0..2 {
        kept.write_all(&request).await.unwrap();
        let (status, text) = read_response(&mut kept)
            .await
            .unwrap_or_else(|e| panic!("review {round} on the kept-alive connection: {e}"));
        assert_eq!(status, 200, "{text}");
        assert!(text.contains(UID), "{text}");
        // Idle for over twice --header-timeout before the next review.
        if round == 0 {
            tokio::time::sleep(Duration::from_millis(2500)).await;
        }
    }
    let idle_from = Instant::now();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(30), kept.read(&mut buf))
        .await
        .expect("the idle connection was never closed");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    let idled = idle_from.elapsed();
    assert!(
        idled >= Duration::from_millis(5500),
        "closed {idled:?} into its idle time, before --idle-timeout"
    );

    // The first request's headers: still --header-timeout.
    let mut slow = connect().await;
    slow.write_all(b"POST /validate HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    expect_cut_off(
        &mut slow,
        Duration::from_secs(30),
        "unfinished first headers",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "unfinished first headers held {:?}, past --header-timeout",
        started.elapsed()
    );
    assert!(
        server
            .stderr()
            .contains("--idle-timeout is not above the apiserver's 90 s keep-alive"),
        "no warning for --idle-timeout=6s: {}",
        server.stderr()
    );
}
