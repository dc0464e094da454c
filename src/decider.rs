//! Runs decisions off the async workers: a small fixed pool of OS threads fed
//! by a bounded queue, each decision under a deadline.
//!
//! A jq ignore rule made only of allowed constructs can still run for hours
//! (`(.,.)|(.,.)|…|select(false)` doubles its work at every step). jaq has no
//! cancellation and a thread cannot be interrupted, so a runaway decision keeps
//! its thread until it ends. What this module guarantees instead: the caller
//! gets an answer by the deadline; the async workers (which also serve the
//! probes) never run a decision; and the pool never grows, so runaway rules
//! take at most `threads` CPUs. When every thread is busy, new decisions wait
//! in the queue and time out; when the queue is full they fail at once.
//! (`tokio::task::spawn_blocking` would not do: its pool grows to 512 threads.)
//!
//! Nothing here knows about HTTP: the server and `driftguard check` share it.

// The decision core: no function over about 60 lines (clippy.toml), so CI
// fails when one grows.
#![warn(clippy::too_many_lines)]

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a decision produced no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeciderError {
    /// Not finished (or not even started) within its deadline.
    #[error("the decision exceeded its deadline of {0:?}")]
    TimedOut(Duration),
    /// Every thread busy and the queue full: refused without waiting.
    #[error("the decision queue is full ({0} waiting); every decision thread is busy")]
    QueueFull(usize),
    /// The decision panicked; the text says where.
    #[error("{0}")]
    Panicked(String),
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Decisions dropped unrun, process-wide: their deadline passed while they
/// waited in the queue. Registered as `driftguard_decisions_skipped_total`.
pub static SKIPPED: std::sync::LazyLock<prometheus_client::metrics::counter::Counter> =
    std::sync::LazyLock::new(Default::default);

struct Task {
    deadline: Instant,
    job: Job,
}

/// A handle on the pool; clones share it. The threads end once every handle
/// is dropped and they are idle (a stuck one ends with its decision); dropping
/// never waits for them, so `check` can exit while one is stuck.
#[derive(Clone)]
pub struct Decider {
    queue: SyncSender<Task>,
    capacity: usize,
    threads: usize,
    busy: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("threads", &self.threads)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Decision threads get the main thread's stack size: deep JSON and jq
/// recursion must not overflow where `check` on the main thread did not.
const STACK_BYTES: usize = 8 * 1024 * 1024;

impl Decider {
    /// Starts `threads` threads (at least 1) behind a queue of `capacity`
    /// waiting decisions (at least 1).
    pub fn new(threads: usize, capacity: usize) -> std::io::Result<Self> {
        let (threads, capacity) = (threads.max(1), capacity.max(1));
        let (queue, tasks) = mpsc::sync_channel::<Task>(capacity);
        let tasks = Arc::new(Mutex::new(tasks));
        let busy = Arc::new(AtomicUsize::new(0));
        for i in 0..threads {
            let (tasks, busy) = (tasks.clone(), busy.clone());
            std::thread::Builder::new()
                .name(format!("driftguard-decide-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || work(&tasks, &busy))?;
        }
        Ok(Self {
            queue,
            capacity,
            threads,
            busy,
        })
    }

    /// The default size: one thread per CPU, at least two, so one runaway rule
    /// never holds up every decision.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads running a decision right now (stuck ones included).
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Runs `decide` on the pool and waits at most `deadline` (queueing
    /// included) without blocking the async worker.
    pub async fn run<T, F>(&self, deadline: Duration, decide: F) -> Result<T, DeciderError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(deadline, move || {
            let _ = tx.send(guarded(decide));
        })?;
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(Err(DeciderError::TimedOut(_)))) => Err(DeciderError::TimedOut(deadline)),
            Ok(Ok(out)) => out,
            // The job was dropped unrun: its deadline passed in the queue.
            Ok(Err(_)) | Err(_) => Err(DeciderError::TimedOut(deadline)),
        }
    }

    /// [`Decider::run`] for a caller without a runtime (`driftguard check`).
    pub fn run_blocking<T, F>(&self, deadline: Duration, decide: F) -> Result<T, DeciderError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(deadline, move || {
            let _ = tx.send(guarded(decide));
        })?;
        match rx.recv_timeout(deadline) {
            Ok(Err(DeciderError::TimedOut(_))) => Err(DeciderError::TimedOut(deadline)),
            Ok(out) => out,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                Err(DeciderError::TimedOut(deadline))
            }
        }
    }

    fn submit(
        &self,
        deadline: Duration,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), DeciderError> {
        let task = Task {
            deadline: Instant::now() + deadline,
            job: Box::new(job),
        };
        match self.queue.try_send(task) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(DeciderError::QueueFull(self.capacity)),
            // The threads never exit while a handle lives; this is unreachable
            // in practice, and a failed decision is the honest answer anyway.
            Err(TrySendError::Disconnected(_)) => Err(DeciderError::Panicked(
                "internal error: the decision threads have stopped".into(),
            )),
        }
    }
}

fn work(tasks: &Mutex<Receiver<Task>>, busy: &AtomicUsize) {
    loop {
        // The lock is held only while waiting for the next task.
        let next = tasks.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(task) = next else { return };
        // Nobody waits for an expired decision: skip it rather than burn CPU.
        if Instant::now() >= task.deadline {
            SKIPPED.inc();
            continue;
        }
        // Jobs catch their own panics (`guarded`); this one keeps the thread
        // alive should a result channel ever panic.
        busy.fetch_add(1, Ordering::SeqCst);
        let job = task.job;
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
            crate::deadline::with_deadline(task.deadline, job)
        }));
        busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `decide`, turning a panic into an error: a bug must cost one review
/// its normal answer, never the server.
pub fn guarded<T>(decide: impl FnOnce() -> T) -> Result<T, DeciderError> {
    std::panic::catch_unwind(AssertUnwindSafe(decide)).map_err(|panic| {
        if crate::deadline::is_deadline(panic.as_ref()) {
            // Stopped by a checkpoint; the caller knows the deadline's length.
            return DeciderError::TimedOut(Duration::ZERO);
        }
        let text = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        DeciderError::Panicked(format!("internal error: {text}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Blocks its thread until `release` is set (a stand-in for a runaway rule).
    fn stuck(release: Arc<AtomicBool>) -> impl FnOnce() + Send + 'static {
        move || {
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    #[test]
    fn a_panic_becomes_an_error_text() {
        let out: Result<(), DeciderError> = guarded(|| panic!("boom"));
        assert_eq!(out.unwrap_err().to_string(), "internal error: boom");
    }

    #[test]
    fn answers_and_survives_panics() {
        let pool = Decider::new(1, 4).unwrap();
        let long = Duration::from_secs(30);
        assert_eq!(pool.run_blocking(long, || 41 + 1), Ok(42));
        let panicked = pool.run_blocking(long, || -> u8 { panic!("boom") });
        assert_eq!(
            panicked,
            Err(DeciderError::Panicked("internal error: boom".into()))
        );
        // The only thread is still there.
        assert_eq!(pool.run_blocking(long, || "still here"), Ok("still here"));
    }

    /// Fills the only thread of `pool` with a job that runs until released.
    fn occupy(pool: &Decider) -> Arc<AtomicBool> {
        let release = Arc::new(AtomicBool::new(false));
        pool.submit(Duration::from_secs(600), stuck(release.clone()))
            .unwrap();
        while pool.busy() == 0 {
            std::thread::yield_now();
        }
        release
    }

    #[test]
    fn a_stuck_pool_times_out_then_refuses_without_growing() {
        let pool = Decider::new(1, 1).unwrap();
        let release = occupy(&pool);
        let short = Duration::from_millis(50);
        // Waits in the queue, counted against its deadline.
        assert_eq!(
            pool.run_blocking(short, || 1),
            Err(DeciderError::TimedOut(short))
        );
        // The queue still holds that expired task: refused at once.
        assert_eq!(
            pool.run_blocking(short, || 1),
            Err(DeciderError::QueueFull(1))
        );
        assert_eq!(pool.busy(), 1);
        release.store(true, Ordering::SeqCst);
        // The thread skips the expired task and serves the next one.
        let long = Duration::from_secs(30);
        let started = Instant::now();
        loop {
            match pool.run_blocking(long, || 7) {
                Ok(v) => break assert_eq!(v, 7),
                Err(DeciderError::QueueFull(_)) if started.elapsed() < long => {
                    std::thread::yield_now()
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_decision_with_checkpoints_ends_at_its_deadline_and_frees_its_thread() {
        let pool = Decider::new(1, 4).unwrap();
        let short = Duration::from_millis(50);
        let endless = || loop {
            crate::deadline::checkpoint();
        };
        assert_eq!(
            pool.run_blocking(short, endless),
            Err(DeciderError::TimedOut(short))
        );
        // The only thread is free again, well before a stuck one would be.
        let started = Instant::now();
        while pool.busy() > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "thread still held"
            );
            std::thread::yield_now();
        }
        assert_eq!(pool.run_blocking(Duration::from_secs(30), || 5), Ok(5));
    }

    #[tokio::test]
    async fn async_callers_get_the_same_answers() {
        let pool = Decider::new(1, 2).unwrap();
        assert_eq!(pool.run(Duration::from_secs(30), || 3).await, Ok(3));
        let release = occupy(&pool);
        let short = Duration::from_millis(50);
        assert_eq!(
            pool.run(short, || 4).await,
            Err(DeciderError::TimedOut(short))
        );
        release.store(true, Ordering::SeqCst);
    }
}
