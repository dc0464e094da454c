//! Runs decisions under a deadline: a small fixed pool of OS threads fed by a
//! bounded queue, for any decision that may run a jq program.
//!
//! A jq ignore rule made only of allowed constructs can still run for hours
//! (`(.,.)|(.,.)|…|select(false)` doubles its work at every step); its
//! checkpoints ([`crate::policy::jq`]'s ticks) stop it at the deadline, as
//! driftguard's own loops are: each decision gets a [`Deadline`] made here,
//! and a stopped one returns [`Stopped`]. What this module guarantees: the caller gets
//! an answer by the deadline and the thread is freed with it; the async
//! workers (which also serve the probes) never run a jq program; and the pool
//! never grows. When every thread is busy, new decisions wait in the queue and
//! time out; when the queue is full they fail at once.
//! (`tokio::task::spawn_blocking` would not do: its pool grows to 512 threads.)
//!
//! A decision is first tried on the caller's own thread
//! ([`Decider::run_here_first`]) when its input is small: handing it to a
//! pool thread and back costs two thread wake-ups, which on a VM are most of
//! an ordinary review's latency. Everything a decision runs is bounded by
//! its input and stopped at its deadline ([`crate::deadline`]), except a jq
//! program: such a try gets a deadline that refuses jq
//! ([`Deadline::without_jq`]), stops with [`Stopped::NeedsPool`] before the
//! program starts, and the decision runs again, whole, on the pool.
//! Decisions are pure, so the second run gives the answer the first would
//! have. The policy only reads its deadline; it never calls in here.
//!
//! Nothing here knows about HTTP: the server and `driftguard check` share it.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deadline::{Deadline, Stopped};

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

/// A decision as the pool runs it, given its task's deadline.
type Job = Box<dyn FnOnce(&Deadline) + Send + 'static>;

/// Decisions tried on the caller's thread, process-wide, by outcome:
/// answered there, or moved to the pool for a jq program. Registered as
/// `driftguard_decisions_tried_here_total` and `…_moved_to_pool_total`.
pub static TRIED_HERE: std::sync::LazyLock<prometheus_client::metrics::counter::Counter> =
    std::sync::LazyLock::new(Default::default);
/// Decisions moved to the pool (see [`TRIED_HERE`]).
pub static MOVED_TO_POOL: std::sync::LazyLock<prometheus_client::metrics::counter::Counter> =
    std::sync::LazyLock::new(Default::default);

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
    moved: Arc<MovedKinds>,
}

/// How long a kind whose decision reached jq goes straight to the pool: its
/// rules rarely change, and a wasted try costs the steps before the rules.
pub const RETRY_HERE_AFTER: Duration = Duration::from_secs(30);

/// The kinds whose decisions lately reached a jq program, and when.
#[derive(Default)]
struct MovedKinds(Mutex<std::collections::HashMap<String, Instant>>);

impl MovedKinds {
    /// Kinds are the cluster's types, at most 507 bytes each (`request::parse`
    /// refuses longer), so the map holds at most about 2 MiB.
    const MAX: usize = 4096;

    fn lately(&self, kind: &str, now: Instant) -> bool {
        let kinds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .get(kind)
            .is_some_and(|at| now.duration_since(*at) < RETRY_HERE_AFTER)
    }

    fn note(&self, kind: &str, now: Instant) {
        let mut kinds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kinds.len() >= Self::MAX {
            kinds.clear();
        }
        kinds.insert(kind.to_owned(), now);
    }
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
            moved: Arc::default(),
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

    /// How many threads the pool runs.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads running a decision right now (stuck ones included).
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Runs `decide` on the pool and waits at most `deadline` (queueing
    /// included) without blocking the async worker. `decide` gets the
    /// deadline to stop at; jq programs may run.
    pub async fn run<T, F>(&self, deadline: Duration, decide: F) -> Result<T, DeciderError>
    where
        F: FnOnce(&Deadline) -> Result<T, Stopped> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(deadline, move |at: &Deadline| {
            let _ = tx.send(on_pool(decide, at));
        })?;
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(Err(DeciderError::TimedOut(_)))) => Err(DeciderError::TimedOut(deadline)),
            Ok(Ok(out)) => out,
            // The job was dropped unrun: its deadline passed in the queue.
            Ok(Err(_)) | Err(_) => Err(DeciderError::TimedOut(deadline)),
        }
    }

    /// Runs `decide` on this thread when `here` names the kind of a small
    /// input, unless it reaches a jq program ([`Stopped::NeedsPool`]): then,
    /// when not `here`, and for a kind that reached jq in the last
    /// [`RETRY_HERE_AFTER`], on the pool ([`Decider::run`]) within what is
    /// left of `deadline`.
    pub async fn run_here_first<T, F>(
        &self,
        deadline: Duration,
        here: Option<&str>,
        decide: F,
    ) -> Result<T, DeciderError>
    where
        F: Fn(&Deadline) -> Result<T, Stopped> + Send + 'static,
        T: Send + 'static,
    {
        let started = Instant::now();
        if let Some(kind) = here.filter(|kind| !self.moved.lately(kind, started)) {
            TRIED_HERE.inc();
            if let Some(out) = try_here(started + deadline, &decide) {
                return out.map_err(|e| match e {
                    DeciderError::TimedOut(_) => DeciderError::TimedOut(deadline),
                    other => other,
                });
            }
            MOVED_TO_POOL.inc();
            self.moved.note(kind, started);
        }
        let left = deadline.saturating_sub(started.elapsed());
        self.run(left, decide).await.map_err(|e| match e {
            DeciderError::TimedOut(_) => DeciderError::TimedOut(deadline),
            other => other,
        })
    }

    /// [`Decider::run`] for a caller without a runtime (`driftguard check`).
    pub fn run_blocking<T, F>(&self, deadline: Duration, decide: F) -> Result<T, DeciderError>
    where
        F: FnOnce(&Deadline) -> Result<T, Stopped> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(deadline, move |at: &Deadline| {
            let _ = tx.send(on_pool(decide, at));
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
        job: impl FnOnce(&Deadline) + Send + 'static,
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
        busy.fetch_add(1, Ordering::SeqCst);
        let deadline = Deadline::at(task.deadline);
        // Jobs catch their own panics (`guarded`); this safety net keeps the
        // thread alive should a result channel ever panic. No deadline
        // relies on it: a stopped decision returns.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| (task.job)(&deadline)));
        busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A decision run on a pool thread, under `deadline`, as its answer.
fn on_pool<T>(
    decide: impl FnOnce(&Deadline) -> Result<T, Stopped>,
    deadline: &Deadline,
) -> Result<T, DeciderError> {
    match guarded(|| decide(deadline))? {
        Ok(value) => Ok(value),
        // The caller knows the deadline's length.
        Err(Stopped::Passed) => Err(DeciderError::TimedOut(Duration::ZERO)),
        // A pool's deadline allows jq: this is a bug, answered as one.
        Err(Stopped::NeedsPool) => Err(DeciderError::Panicked(
            "internal error: a decision on the pool was refused jq".into(),
        )),
    }
}

/// One try of `decide` on this thread under `deadline`, with jq refused:
/// `None` when it reached a jq program.
fn try_here<T>(
    deadline: Instant,
    decide: &impl Fn(&Deadline) -> Result<T, Stopped>,
) -> Option<Result<T, DeciderError>> {
    let deadline = Deadline::at(deadline).without_jq();
    match guarded(|| decide(&deadline)) {
        Ok(Ok(value)) => Some(Ok(value)),
        Ok(Err(Stopped::Passed)) => Some(Err(DeciderError::TimedOut(Duration::ZERO))),
        Ok(Err(Stopped::NeedsPool)) => None,
        Err(panicked) => Some(Err(panicked)),
    }
}

/// Runs `decide`, turning a panic into an error: a bug must cost one review
/// its normal answer, never the server. A safety net for bugs only: a
/// decision stopped at its deadline returns [`Stopped`], it does not unwind.
pub fn guarded<T>(decide: impl FnOnce() -> T) -> Result<T, DeciderError> {
    std::panic::catch_unwind(AssertUnwindSafe(decide)).map_err(panic_error)
}

fn panic_error(panic: Box<dyn std::any::Any + Send>) -> DeciderError {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    DeciderError::Panicked(format!("internal error: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Blocks its thread until `release` is set (a stand-in for a runaway
    /// rule without checkpoints).
    fn stuck(release: Arc<AtomicBool>) -> impl FnOnce(&Deadline) + Send + 'static {
        move |_| {
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// A decision that only ends at its deadline, checking it as driftguard's
    /// loops do.
    fn endless(deadline: &Deadline) -> Result<(), Stopped> {
        loop {
            deadline.checkpoint()?;
        }
    }

    /// A decision that answers `value` at once.
    fn answer<T: Send + 'static>(value: T) -> impl FnOnce(&Deadline) -> Result<T, Stopped> + Send {
        move |_| Ok(value)
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
        assert_eq!(pool.run_blocking(long, answer(41 + 1)), Ok(42));
        let panicked = pool.run_blocking(long, |_| -> Result<u8, Stopped> { panic!("boom") });
        assert_eq!(
            panicked,
            Err(DeciderError::Panicked("internal error: boom".into()))
        );
        // The only thread is still there.
        assert_eq!(
            pool.run_blocking(long, answer("still here")),
            Ok("still here")
        );
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
            pool.run_blocking(short, answer(1)),
            Err(DeciderError::TimedOut(short))
        );
        // The queue still holds that expired task: refused at once.
        assert_eq!(
            pool.run_blocking(short, answer(1)),
            Err(DeciderError::QueueFull(1))
        );
        assert_eq!(pool.busy(), 1);
        release.store(true, Ordering::SeqCst);
        // The thread skips the expired task and serves the next one.
        let long = Duration::from_secs(30);
        let started = Instant::now();
        loop {
            match pool.run_blocking(long, answer(7)) {
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
        let stopped = crate::deadline::STOPPED.get();
        let started = Instant::now();
        assert_eq!(
            pool.run_blocking(short, endless),
            Err(DeciderError::TimedOut(short))
        );
        assert!(started.elapsed() >= short);
        // Counted once it stopped (other tests may stop theirs meanwhile).
        let counted = Instant::now();
        while crate::deadline::STOPPED.get() == stopped {
            assert!(counted.elapsed() < Duration::from_secs(30), "not counted");
            std::thread::yield_now();
        }
        // The only thread is free again, well before a stuck one would be.
        let started = Instant::now();
        while pool.busy() > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "thread still held"
            );
            std::thread::yield_now();
        }
        assert_eq!(pool.run_blocking(Duration::from_secs(30), answer(5)), Ok(5));
    }

    /// A current-thread runtime: a jq program run here would hold the only
    /// async worker.
    #[tokio::test]
    async fn small_decisions_run_here_and_any_jq_program_on_the_pool() {
        let pool = Decider::new(1, 2).unwrap();
        let here = std::thread::current().id();
        let long = Duration::from_secs(30);
        let on = |_: &Deadline| Ok(std::thread::current().id());
        assert_eq!(pool.run_here_first(long, Some("A"), on).await, Ok(here));
        assert_ne!(pool.run_here_first(long, None, on).await.unwrap(), here);
        // A decision that reaches jq runs again, whole, on the pool.
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        let with_jq = move |deadline: &Deadline| {
            counted.fetch_add(1, Ordering::SeqCst);
            deadline.allow_jq()?;
            Ok(std::thread::current().id())
        };
        assert_ne!(
            pool.run_here_first(long, Some("B"), with_jq.clone())
                .await
                .unwrap(),
            here
        );
        assert_eq!(tries.load(Ordering::SeqCst), 2);
        // Kind B now goes straight to the pool, without a wasted try; A not.
        assert_ne!(
            pool.run_here_first(long, Some("B"), with_jq).await.unwrap(),
            here
        );
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        assert_eq!(pool.run_here_first(long, Some("A"), on).await, Ok(here));
    }

    /// As the server runs a review with a jq rule: the try here stops where
    /// the program would start, and the decision runs again on the pool.
    #[tokio::test]
    async fn a_decision_tried_here_that_reaches_a_jq_rule_runs_on_the_pool() {
        use crate::policy::jq::{JqInput, JqPath};
        let pool = Decider::new(1, 2).unwrap();
        let here = std::thread::current().id();
        let rule = Arc::new(JqPath::compile(".spec.replicas").unwrap());
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        let decide = move |deadline: &Deadline| {
            counted.fetch_add(1, Ordering::SeqCst);
            let object = serde_json::json!({"spec": {"replicas": 2}});
            let paths = rule.paths(&JqInput::new(&object), deadline)?;
            Ok((
                std::thread::current().id(),
                paths.map_err(|e| e.to_string()),
            ))
        };
        let long = Duration::from_secs(30);
        let (on, paths) = pool.run_here_first(long, Some("C"), decide).await.unwrap();
        assert_ne!(on, here);
        assert_eq!(paths.unwrap().len(), 1);
        assert_eq!(tries.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_decision_tried_here_keeps_its_deadline_and_its_panics() {
        let pool = Decider::new(1, 2).unwrap();
        let short = Duration::from_millis(50);
        assert_eq!(
            pool.run_here_first(short, Some("A"), endless).await,
            Err(DeciderError::TimedOut(short))
        );
        let boom = |_: &Deadline| -> Result<u8, Stopped> { panic!("boom") };
        assert_eq!(
            pool.run_here_first(short, Some("A"), boom).await,
            Err(DeciderError::Panicked("internal error: boom".into()))
        );
    }

    #[tokio::test]
    async fn async_callers_get_the_same_answers() {
        let pool = Decider::new(1, 2).unwrap();
        assert_eq!(pool.run(Duration::from_secs(30), answer(3)).await, Ok(3));
        let release = occupy(&pool);
        let short = Duration::from_millis(50);
        assert_eq!(
            pool.run(short, answer(4)).await,
            Err(DeciderError::TimedOut(short))
        );
        release.store(true, Ordering::SeqCst);
    }
}
