//! A reader that stops reading the audit stream must not stop decisions: the
//! real binary with its stdout piped and never read answers every review in
//! time, drops the records that do not fit, and counts them.

use driftguard_testkit::process;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use driftguard::certs::Authority;
use process::{trusting, unused_port, wait_for};

const REVIEW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/deployment-update-image.json"
);
/// Well past what fills a pipe and the writer's queue (`CAPACITY_BYTES`) with
/// records of at least [`USER_BYTES`].
const REVIEWS: usize = 2000;
/// The reviewing user's groups, so many that each record is at least this
/// (a long name is cut to a few hundred bytes, as any quoted input is; the
/// groups are listed whole).
const USER_BYTES: usize = 4000;
const CONCURRENCY: usize = 16;

/// Killed on drop: with stdout stuck it would wait for its records at exit.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn metric(probe: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", probe)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdout_nobody_reads_drops_audit_records_not_decisions() {
    let held = (driftguard::logging::audit_writer::CAPACITY_BYTES + 65536) / USER_BYTES;
    assert!(REVIEWS > held + 200);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("audit-backpressure-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Authority::new("test CA").unwrap();
    let (cert, key) = ca.leaf("server", &["127.0.0.1".into()], &[]).unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();

    let probe = unused_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .arg("serve")
        .arg("--listen=127.0.0.1:0")
        .arg(format!("--probe-listen=127.0.0.1:{probe}"))
        .arg(format!("--tls-cert={}", dir.join("tls.crt").display()))
        .arg(format!("--tls-key={}", dir.join("tls.key").display()))
        .arg("--no-cluster")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open and never read: the pipe fills and stays full.
    let _unread = child.stdout.take().unwrap();
    let stderr = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let (pipe, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            BufReader::new(pipe)
                .lines()
                .map_while(Result::ok)
                .for_each(|l| sink.lock().unwrap().push(l))
        });
    }
    let _child = Killed(child);
    let port: u16 = wait_for("driftguard is serving", Duration::from_secs(20), || {
        let lines = stderr.lock().unwrap();
        lines
            .iter()
            .find_map(|l| {
                l.split_once(" listen=127.0.0.1:")?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .ok_or_else(|| lines.join("\n"))
    });

    // Each review must be answered within this, whatever stdout does.
    let answer_within = Duration::from_secs(5);
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(trusting(ca.cert_pem.as_bytes()))
        .http1_only()
        .timeout(answer_within)
        .build()
        .unwrap();
    let mut review: serde_json::Value =
        serde_json::from_slice(&std::fs::read(REVIEW).unwrap()).unwrap();
    let groups: Vec<String> = (0..USER_BYTES / 40).map(|i| format!("{i:040}")).collect();
    review["request"]["userInfo"]["groups"] = groups.into();
    let body = serde_json::to_vec(&review).unwrap();
    let url = format!("https://127.0.0.1:{port}/validate");

    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let (http, body, url) = (http.clone(), body.clone(), url.clone());
        tasks.spawn(async move {
            let mut slowest = Duration::ZERO;
            for _ in (worker..REVIEWS).step_by(CONCURRENCY) {
                let sent = Instant::now();
                let resp = http
                    .post(&url)
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|e| format!("no answer: {e}"))?;
                let review: serde_json::Value =
                    resp.json().await.map_err(|e| format!("no review: {e}"))?;
                if review["response"]["allowed"] != false {
                    return Err(format!("not the decision: {review}"));
                }
                slowest = slowest.max(sent.elapsed());
            }
            Ok::<_, String>(slowest)
        });
    }
    // Bounded: a writer that blocks decisions would hang here, not pass.
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(done) = tasks.join_next().await {
            slowest = slowest.max(done.unwrap()?);
        }
        Ok::<_, String>(())
    })
    .await;
    let stderr_tail = || stderr.lock().unwrap().join("\n");
    match all {
        Err(_) => panic!(
            "reviews still unanswered after 120 s; stderr:\n{}",
            stderr_tail()
        ),
        Ok(Err(e)) => panic!("{e}; stderr:\n{}", stderr_tail()),
        Ok(Ok(())) => {}
    }
    assert!(slowest < answer_within, "{slowest:?}");

    let dropped = metric(probe, "driftguard_audit_dropped_total").unwrap_or(0.0);
    // At most the queue and the pipe hold records; the rest was dropped.
    assert!(
        dropped >= (REVIEWS - held) as f64 && dropped <= REVIEWS as f64,
        "dropped {dropped} of {REVIEWS}"
    );
    eprintln!(
        "{REVIEWS} reviews in {:?}, slowest {slowest:?}, {dropped} audit records dropped",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
