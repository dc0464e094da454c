//! The cooperative deadline of a decision. A decision thread cannot be
//! interrupted, so driftguard's own long loops (over an object's fields,
//! managedFields leaves and drifted paths) call [`Deadline::checkpoint`] on
//! the decision's [`Deadline`], passed down by reference: once it has passed,
//! the checkpoint returns [`Stopped::Passed`] and the caller returns it with
//! `?`, up to [`crate::decider`], which answers a timed-out decision
//! (`--on-error`). A thread is then held past the deadline by at most the gap
//! between two checkpoints; jq programs get theirs printed in
//! (`policy::jq::ticks`). No unwinding: a function that can stop says so in
//! its signature, and `panic = "abort"` would change nothing.
//!
//! Outside the decision pool (benchmarks, fuzzing, direct calls)
//! [`Deadline::none`] never stops and allows jq.

use std::cell::Cell;
use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;

/// Decisions stopped at a checkpoint, process-wide: each one a thread freed
/// at its deadline rather than run to the end. Registered by
/// [`crate::metrics::Metrics`] as `driftguard_decisions_stopped_total`.
pub static STOPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Why a decision stopped before its end. Not a verdict: the decider turns
/// it into a timed-out decision or runs the decision again on the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// The deadline passed.
    #[error("the decision's deadline passed")]
    Passed,
    /// A jq program was reached where none may run (a decision tried on an
    /// async worker, [`Deadline::without_jq`]); the decider runs it again,
    /// whole, on its pool.
    #[error("the decision reached a jq program outside the decision pool")]
    NeedsPool,
}

/// The deadline of one decision, made by the decider and passed by reference
/// to everything the decision runs. Not `Sync`: one decision, one thread.
#[derive(Debug)]
pub struct Deadline {
    at: Option<Instant>,
    ticks: Cell<u32>,
    /// Sticky: once a check found the deadline passed, every later one fails,
    /// so no caller can swallow a stop and carry on (jq's `//` re-runs its
    /// left side after an error, for example).
    passed: Cell<bool>,
    jq_allowed: bool,
}

/// Checkpoints between two clock reads: a read costs ~25 ns, a loop turn
/// a few, so the clock is read every few microseconds at most.
const TICKS_PER_CLOCK_READ: u32 = 256;

impl Deadline {
    /// A decision that must end by `at`; jq programs may run.
    pub fn at(at: Instant) -> Self {
        Self {
            at: Some(at),
            ticks: Cell::new(0),
            passed: Cell::new(false),
            jq_allowed: true,
        }
    }

    /// No deadline (benchmarks, fuzzing, direct calls): never stops.
    pub fn none() -> Self {
        Self {
            at: None,
            ticks: Cell::new(0),
            passed: Cell::new(false),
            jq_allowed: true,
        }
    }

    /// The same deadline with jq refused: reaching a program stops the
    /// decision with [`Stopped::NeedsPool`].
    pub fn without_jq(self) -> Self {
        Self {
            jq_allowed: false,
            ..self
        }
    }

    /// `Err` once the deadline has passed, reading the clock every 256
    /// calls: for driftguard's own loops.
    #[inline]
    pub fn checkpoint(&self) -> Result<(), Stopped> {
        if self.at.is_none() {
            return Ok(());
        }
        let ticks = self.ticks.get().wrapping_add(1);
        self.ticks.set(ticks);
        if ticks.is_multiple_of(TICKS_PER_CLOCK_READ) || self.passed.get() {
            return self.check_now();
        }
        Ok(())
    }

    /// [`Deadline::checkpoint`], reading the clock at every call: for jq
    /// programs, whose steps can each be long (`policy::jq::ticks`).
    pub fn check_now(&self) -> Result<(), Stopped> {
        if self.passed.get() {
            return Err(Stopped::Passed);
        }
        match self.at {
            Some(at) if Instant::now() >= at => {
                self.passed.set(true);
                STOPPED.inc();
                Err(Stopped::Passed)
            }
            _ => Ok(()),
        }
    }

    /// Called before a jq program runs: `Err` where none may run, or once
    /// the deadline has passed.
    pub fn allow_jq(&self) -> Result<(), Stopped> {
        if !self.jq_allowed {
            return Err(Stopped::NeedsPool);
        }
        self.check_now()
    }

    /// Whether a check has found the deadline passed: what a jq program's
    /// halt is judged by, since a program cannot forge this.
    pub fn has_passed(&self) -> bool {
        self.passed.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_loop_with_checkpoints_stops_at_the_deadline_and_not_before() {
        let at = Instant::now() + Duration::from_millis(30);
        let deadline = Deadline::at(at);
        let mut turns = 0u64;
        let stopped = loop {
            if let Err(stopped) = deadline.checkpoint() {
                break stopped;
            }
            turns += 1;
        };
        assert!(Instant::now() >= at);
        assert_eq!(stopped, Stopped::Passed);
        assert!(turns > 0);
        // Sticky: every later check fails, the cheap one included.
        for _ in 0..10 * TICKS_PER_CLOCK_READ {
            assert_eq!(deadline.checkpoint(), Err(Stopped::Passed));
        }
        assert_eq!(deadline.check_now(), Err(Stopped::Passed));
        assert_eq!(deadline.allow_jq(), Err(Stopped::Passed));
        assert!(deadline.has_passed());
        // A later deadline is a new value: it runs to the end.
        let later = Deadline::at(Instant::now() + Duration::from_secs(60));
        assert_eq!(
            (0..100_000)
                .map(|_| later.checkpoint())
                .filter(Result::is_ok)
                .count(),
            100_000
        );
        assert!(!later.has_passed());
    }

    #[test]
    fn no_deadline_never_stops_and_jq_is_refused_only_when_said() {
        let none = Deadline::none();
        for _ in 0..10 * TICKS_PER_CLOCK_READ {
            assert_eq!(none.checkpoint(), Ok(()));
        }
        assert_eq!(none.allow_jq(), Ok(()));
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(Deadline::at(far).allow_jq(), Ok(()));
        let here = Deadline::at(far).without_jq();
        assert_eq!(here.allow_jq(), Err(Stopped::NeedsPool));
        // Refusing jq is no deadline: the rest of the decision goes on.
        assert_eq!(here.check_now(), Ok(()));
        assert!(!here.has_passed());
    }
}
