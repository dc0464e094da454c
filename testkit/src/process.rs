//! Child processes for the tests that start real servers, waiting for a
//! condition instead of sleeping, and ports taken without a race.
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The repository's root: this crate's parent directory (`testkit/..`),
/// where `scripts/`, `charts/`, `tests/data/` and `target/` are.
pub const ROOT: &str = {
    let dir = env!("CARGO_MANIFEST_DIR").as_bytes();
    let mut end = dir.len();
    while dir[end - 1] != b'/' {
        end -= 1;
    }
    let (root, _) = dir.split_at(end - 1);
    match std::str::from_utf8(root) {
        Ok(root) => root,
        Err(_) => panic!("CARGO_MANIFEST_DIR is UTF-8"),
    }
};

/// Names the step of a long end-to-end story that a panic unwinds through:
/// `let _step = Named("denials");` before the step, so that a failure says
/// which step it was in (not only its file and line).
pub struct Named<'a>(pub &'a str);

impl Drop for Named<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("failed in step: {}", self.0);
        }
    }
}

/// One of driftguard's binaries (`driftguard`, `kubectl-driftguard`) as Cargo
/// built it for the running test. `CARGO_BIN_EXE_<name>` is set only when
/// Cargo compiles the root package's own tests, not this library, so the
/// binary is found next to the test executable: integration tests and
/// benchmarks run from `target/<profile>/deps/`, and Cargo builds the
/// package's binaries into `target/<profile>/` before it runs them. `None`
/// elsewhere (an example) or when the binary is missing.
pub fn cargo_bin(name: &str) -> Option<std::path::PathBuf> {
    if let Some(bin) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return Some(bin.into());
    }
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    let bin = deps.parent()?.join(name);
    bin.is_file().then_some(bin)
}

/// How often a condition is checked again.
pub const POLL: Duration = Duration::from_millis(20);

/// Checks `probe` every [`POLL`] until it gives `Ok`; after `timeout`, `Err`
/// names what was awaited and the last state `probe` observed.
pub fn poll<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => {
                return Err(format!(
                    "waited {timeout:?} for {what}; last observed: {last}"
                ));
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`poll`], failing the test when the condition never holds.
pub fn wait_for<T>(what: &str, timeout: Duration, probe: impl FnMut() -> Result<T, String>) -> T {
    poll(what, timeout, probe).unwrap_or_else(|e| panic!("{e}"))
}

/// [`wait_for`] for conditions that are checked asynchronously.
pub async fn wait_for_async<T, F: Future<Output = Result<T, String>>>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("waited {timeout:?} for {what}; last observed: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Checks `probe` every [`POLL`] for the whole `period`: for what must not
/// happen when nothing signals that it will not. `Err` at the first
/// observation that breaks it.
pub fn holds_for(
    what: &str,
    period: Duration,
    mut probe: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + period;
    loop {
        probe().map_err(|e| format!("{what} broke: {e}"))?;
        if Instant::now() >= deadline {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// A port that was free a moment ago. Another process may take it before the
/// child binds it: only for children started through [`retry_bind`].
pub fn unused_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A start that failed because a port it picked was taken meanwhile.
pub struct PortTaken(pub String);

/// Calls `start` until it does not fail with [`PortTaken`], at most 5 times.
pub fn retry_bind<T>(what: &str, mut start: impl FnMut() -> Result<T, PortTaken>) -> T {
    let mut failures = Vec::new();
    for _ in 0..5 {
        match start() {
            Ok(started) => return started,
            Err(PortTaken(why)) => failures.push(why),
        }
    }
    panic!(
        "{what}: a port was taken on every attempt:\n{}",
        failures.join("\n")
    )
}

/// Whether a child's output says it could not bind (Go and Rust spell it differently).
pub fn says_address_in_use(text: &str) -> bool {
    text.to_ascii_lowercase().contains("address already in use")
}

/// A child process killed on drop, with its output collected.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        if crate::shared::on_keeper_thread() {
            die_with_parent(cmd);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for (stream, sink) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                stdout.clone(),
            ),
            (Box::new(child.stderr.take().unwrap()), stderr.clone()),
        ] {
            readers.push(std::thread::spawn(move || {
                BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                    .for_each(|l| sink.lock().unwrap().push(l))
            }));
        }
        Proc {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            readers,
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    pub fn stderr_tail(&self, n: usize) -> String {
        let lines = self.stderr.lock().unwrap();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The first stderr line containing `needle`.
    pub fn stderr_line(&self, needle: &str) -> Option<String> {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Waits for the exit and for both output streams to be read to the end.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let what = format!("{} to exit", self.name);
        let status = wait_for(&what, within, || match self.child.try_wait() {
            Ok(Some(status)) => Ok(status),
            other => Err(format!("{other:?}")),
        });
        let what = format!("{}'s output to be read to the end", self.name);
        wait_for(&what, Duration::from_secs(10), || {
            if self.readers.iter().all(JoinHandle::is_finished) {
                Ok(())
            } else {
                Err("a pipe is still open".into())
            }
        });
        status
    }

    /// SIGTERM, then SIGKILL if it is still running after 10 s.
    pub fn stop(&mut self) {
        if !self.alive() {
            // Exited (or stopped before): reaped, nothing to signal.
            let _ = self.child.wait();
            return;
        }
        self.terminate();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Has the kernel SIGKILL the child when the thread that spawns it ends: a
/// shared environment's processes, spawned on a thread that ends only with
/// the process ([`crate::shared`]), which never drops them.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls (prctl,
    // getppid) and no allocation (errors from raw codes).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent already gone: the signal would never come.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// `driftguard serve` with its webhook and probe ports.
pub struct Served {
    pub proc: Proc,
    pub port: u16,
    pub probe: u16,
}

/// Starts `binary serve` with `args` (which must not name the listen
/// addresses) on 127.0.0.1:`port`, 0 for any, and waits until it serves and
/// is ready. The webhook port is read from the "driftguard is serving" line;
/// the probe port is not logged, so it is picked here and the start is
/// retried when another process took it meanwhile.
pub fn serve_driftguard(binary: &Path, port: u16, args: &[String]) -> Served {
    serve_driftguard_with_env(binary, port, args, &[])
}

/// [`serve_driftguard`] with environment variables (`RUST_LOG`, say).
pub fn serve_driftguard_with_env(
    binary: &Path,
    port: u16,
    args: &[String],
    env: &[(String, String)],
) -> Served {
    let served = serve_unready(binary, port, args, env);
    served.wait_ready();
    served
}

/// [`serve_driftguard`] without waiting for `/readyz`: serving, maybe not ready.
pub fn serve_driftguard_unready(binary: &Path, port: u16, args: &[String]) -> Served {
    serve_unready(binary, port, args, &[])
}

fn serve_unready(binary: &Path, port: u16, args: &[String], env: &[(String, String)]) -> Served {
    retry_bind("driftguard", || {
        let probe = unused_port();
        let mut proc = Proc::spawn(
            "driftguard",
            Command::new(binary)
                .arg("serve")
                .arg(format!("--listen=127.0.0.1:{port}"))
                .arg(format!("--probe-listen=127.0.0.1:{probe}"))
                .args(args)
                .envs(env.iter().map(|(k, v)| (k, v))),
        );
        // Both ports are bound by this process once it logs the line.
        let serving = poll("driftguard is serving", Duration::from_secs(20), || {
            if let Some(line) = proc.stderr_line("driftguard is serving") {
                return Ok(Some(line));
            }
            if proc.alive() {
                Err(proc.stderr_tail(20))
            } else {
                Ok(None)
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let Some(line) = serving else {
            let _ = proc.wait_exit(Duration::from_secs(10));
            let stderr = proc.stderr_text();
            if says_address_in_use(&stderr) {
                return Err(PortTaken(stderr));
            }
            panic!("driftguard exited before serving: {stderr}");
        };
        let port = line
            .split_once(" listen=127.0.0.1:")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Ok(Served { proc, port, probe })
    })
}

impl Served {
    /// A plain HTTP/1.0 GET on the probe port: (status, body).
    pub fn probe_get(&self, path: &str) -> (u16, String) {
        probe_get(self.probe, path)
    }

    pub fn wait_ready(&self) {
        wait_for(
            "driftguard /readyz 200",
            Duration::from_secs(20),
            || match self.probe_get("/readyz") {
                (200, _) => Ok(()),
                (status, body) => Err(format!(
                    "{status} {body:?}; stderr: {}",
                    self.proc.stderr_tail(20)
                )),
            },
        )
    }
}

/// A TLS 1.2+ client configuration (ring) that trusts only the certificates
/// of `ca_pem` (every one of a bundle, as the apiserver trusts a caBundle).
pub fn trusting(ca_pem: &[u8]) -> rustls::ClientConfig {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(der.unwrap()).unwrap();
    }
    assert!(!roots.is_empty(), "no certificate in {ca_pem:?}");
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// An HTTPS client that trusts only `ca_pem`, for reviews sent straight to
/// driftguard.
pub fn https_client(ca_pem: &[u8], timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_backend_preconfigured(trusting(ca_pem))
        .timeout(timeout)
        .build()
        .unwrap()
}

/// A plain HTTP/1.0 GET on 127.0.0.1:`port`: (status, body); status 0 when
/// nothing answered.
pub fn probe_get(port: u16, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").is_err() {
        return (0, String::new());
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        status,
        text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned(),
    )
}
