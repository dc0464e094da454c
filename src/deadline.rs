//! The cooperative deadline of a decision. A decision thread cannot be
//! interrupted, so driftguard's own long loops (over an object's fields,
//! managedFields leaves and drifted paths) call [`checkpoint`]: once the
//! deadline of the decision running on this thread has passed, it unwinds
//! the decision with [`DeadlinePassed`], which [`crate::decider`] turns into a
//! timed-out decision, answered by `--on-error`. A thread is then held past
//! the deadline by at most the gap between two checkpoints; jq programs get
//! theirs printed in (`policy::jq::ticks`).
//!
//! Outside the decision pool (benchmarks, fuzzing, direct calls) no deadline
//! is set and a checkpoint costs a thread-local read.

use std::cell::Cell;
use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static TICKS: Cell<u32> = const { Cell::new(0) };
}

/// Decisions unwound at a checkpoint, process-wide: each one a thread freed
/// at its deadline rather than run to the end. Registered by
/// [`crate::metrics::Metrics`] as `driftguard_decisions_stopped_total`.
pub static STOPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The unwinding payload of a decision stopped at its deadline.
#[derive(Debug)]
pub struct DeadlinePassed;

/// Checkpoints between two clock reads: a read costs ~25 ns, a loop turn
/// a few, so the clock is read every few microseconds at most.
const TICKS_PER_CLOCK_READ: u32 = 256;

/// Runs `f` with `deadline` as this thread's decision deadline.
pub fn with_deadline<T>(deadline: Instant, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Instant>);
    impl Drop for Reset {
        fn drop(&mut self) {
            DEADLINE.with(|d| d.set(self.0));
        }
    }
    let _reset = Reset(DEADLINE.with(|d| d.replace(Some(deadline))));
    f()
}

/// Unwinds the running decision with [`DeadlinePassed`] once its deadline has
/// passed. `resume_unwind` skips the panic hook: this is no bug, nothing is
/// logged as a panic.
pub fn checkpoint() {
    if DEADLINE.with(Cell::get).is_none() {
        return;
    }
    let ticks = TICKS.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n
    });
    if ticks.is_multiple_of(TICKS_PER_CLOCK_READ) {
        checkpoint_now();
    }
}

/// [`checkpoint`], reading the clock at every call: for jq programs, whose
/// steps can each be long (`policy::jq::ticks`).
pub fn checkpoint_now() {
    if let Some(deadline) = DEADLINE.with(Cell::get)
        && Instant::now() >= deadline
    {
        STOPPED.inc();
        std::panic::resume_unwind(Box::new(DeadlinePassed));
    }
}

/// Whether a caught unwind is a stopped decision rather than a bug.
pub fn is_deadline(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<DeadlinePassed>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_loop_with_checkpoints_stops_at_the_deadline_and_not_before() {
        let deadline = Instant::now() + Duration::from_millis(30);
        let stopped = std::panic::catch_unwind(|| {
            with_deadline(deadline, || {
                loop {
                    checkpoint();
                }
            })
        });
        assert!(Instant::now() >= deadline);
        assert!(is_deadline(stopped.unwrap_err().as_ref()));
        // The deadline is gone with the decision: no more unwinding.
        for _ in 0..10 * TICKS_PER_CLOCK_READ {
            checkpoint();
        }
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            with_deadline(later, || (0..100_000).inspect(|_| checkpoint()).count()),
            100_000
        );
    }
}
