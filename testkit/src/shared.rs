//! One environment (a control plane, driftguard, what the tests need in it)
//! per test binary, shared by its tests: each scenario is its own `#[test]`
//! without starting a control plane of its own.
//!
//! The environment is set up by the first test that asks for it, on a thread
//! that lives as long as the process: children started there get
//! `PR_SET_PDEATHSIG` (SIGKILL), which the kernel sends when the thread that
//! forked them ends, so etcd, kube-apiserver and driftguard die with the test
//! process however it ends (a static is never dropped). On a normal exit an
//! `atexit` handler drops the environment too (processes stopped, directory
//! removed), unless a test failed with it: then its directory stays, as a
//! failing test's does.
//!
//! Tests take the environment one at a time (`Shared::with`); whichever order
//! libtest runs them in, a scenario that changes something another one reads
//! must put it back before it returns.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};

thread_local! {
    /// Set on the keeper thread only: what [`crate::process::Proc::spawn`]
    /// starts there dies with the process.
    static KEEPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether children spawned on this thread should die with the process.
pub(crate) fn on_keeper_thread() -> bool {
    KEEPER.with(std::cell::Cell::get)
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on the keeper thread (started on first use, never ended) and
/// returns what it returned; a panic in `job` is resumed here. For whatever
/// starts a child that must outlive the calling test's thread: its setup, a
/// restart, a whole test (`on_keeper(|| ENV.with(...))`). Jobs run one at a
/// time; one that calls `on_keeper` runs that job at once.
pub fn on_keeper<R: Send + 'static>(job: impl FnOnce() -> R + Send + 'static) -> R {
    if on_keeper_thread() {
        return job();
    }
    static JOBS: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("testkit-keeper".into())
            .spawn(move || {
                KEEPER.with(|k| k.set(true));
                // Never returns: the sender lives in a static.
                for job in rx {
                    job();
                }
            })
            .expect("the keeper thread starts");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)));
    });
    jobs.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .expect("the keeper thread runs");
    match rx.recv().expect("the keeper thread answers") {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// An environment shared by the tests of one binary: `static ENV: Shared<Env> = Shared::new();`.
pub struct Shared<T> {
    env: OnceLock<Result<Mutex<Option<T>>, String>>,
    failed: AtomicBool,
}

impl<T: Send + 'static> Shared<T> {
    pub const fn new() -> Self {
        Shared {
            env: OnceLock::new(),
            failed: AtomicBool::new(false),
        }
    }

    /// Runs `test` with the environment, which `setup` builds (on the keeper
    /// thread) for the first test that asks; tests take it one at a time. A
    /// failed setup fails every test with its message, without trying again.
    pub fn with<R>(&'static self, setup: fn() -> T, test: impl FnOnce(&mut T) -> R) -> R {
        let env = self.env.get_or_init(|| {
            let built = on_keeper(move || {
                std::panic::catch_unwind(setup).map_err(|panic| panic_text(&*panic))
            });
            if built.is_ok() {
                at_exit(Box::new(|| self.teardown()));
            }
            built.map(|env| Mutex::new(Some(env)))
        });
        let env = match env {
            Ok(env) => env,
            Err(why) => panic!("the shared environment could not be set up: {why}"),
        };
        // A test that panicked holding it leaves it as it was: the next
        // test reads what is there (the failure is reported by that test).
        let mut guard: MutexGuard<'_, Option<T>> = env.lock().unwrap_or_else(|p| p.into_inner());
        let marks = MarkFailed(&self.failed);
        let value = test(guard.as_mut().expect("torn down only at exit"));
        drop(marks);
        value
    }

    fn teardown(&self) {
        let Some(Ok(env)) = self.env.get() else {
            return;
        };
        // A test still holding it (not possible once libtest exits) is left alone.
        let Ok(mut guard) = env.try_lock().or_else(|e| match e {
            std::sync::TryLockError::Poisoned(p) => Ok(p.into_inner()),
            std::sync::TryLockError::WouldBlock => Err(()),
        }) else {
            return;
        };
        let env = guard.take();
        if self.failed.load(Ordering::SeqCst) {
            // Kept for a look; its children die with the process.
            std::mem::forget(env);
        } else {
            drop(env);
        }
    }
}

impl<T: Send + 'static> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Records a test that panicked with the environment.
struct MarkFailed<'a>(&'a AtomicBool);

impl Drop for MarkFailed<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// A panic's message.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

type Teardown = Box<dyn FnOnce() + Send>;
static TEARDOWNS: Mutex<Vec<Teardown>> = Mutex::new(Vec::new());

/// Runs `teardown` when the process exits normally (libtest returns from
/// main, or exits 101 after a failure).
fn at_exit(teardown: Teardown) {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    TEARDOWNS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(teardown);
    REGISTERED.get_or_init(|| {
        extern "C" fn run() {
            let teardowns =
                std::mem::take(&mut *TEARDOWNS.lock().unwrap_or_else(|p| p.into_inner()));
            for teardown in teardowns {
                teardown();
            }
        }
        // SAFETY: `run` is a plain function that lives as long as the process.
        let registered = unsafe { libc::atexit(run) };
        assert_eq!(registered, 0, "atexit");
    });
}
