//! The memory budget: an upper bound on the bytes all reviews in flight may
//! hold, body, parsed objects and decision together.
//!
//! One review's peak is at most [`BYTES_PER_BODY_BYTE`] times its body (see
//! `scripts/review-rss.sh`), so a review reserves that many bytes per body
//! byte before its body is read: the Content-Length up front, and more as
//! frames arrive past it. A review that cannot get its share before its
//! deadline is answered by `--on-error` without being parsed. Reviews that
//! fit go ahead of larger ones waiting (no FIFO), so a flood of maximal bodies
//! cannot hold up the ordinary small ones behind it; the large ones then wait
//! out their deadline, which bounds how long they hold a connection.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Peak bytes one review holds per byte of its body, measured with
/// `scripts/review-rss.sh` and rounded up. The worst shapes are many tiny
/// fields, each a drifted path on a Flux object (36x: the parsed objects,
/// their normalized copies, the managedFields leaf sets and the path lists);
/// a Deployment with 70,000 env vars takes 15x as a CREATE and 21x as an
/// UPDATE.
pub const BYTES_PER_BODY_BYTE: usize = 40;

/// Reserved for a review before any of its body is known (no Content-Length).
pub const FIRST_RESERVATION: usize = 64 * 1024;

#[derive(Debug)]
pub struct MemoryBudget {
    capacity: usize,
    used: Mutex<usize>,
    freed: Notify,
    in_use: Gauge,
}

/// Why a reservation was not granted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    /// Larger than the whole budget: it can never fit.
    #[error("the review needs {needed} bytes, more than the whole memory budget of {capacity}")]
    Never { needed: usize, capacity: usize },
    /// Other reviews held the budget until the deadline.
    #[error("the memory budget of {capacity} bytes stayed in use by other reviews")]
    Busy { capacity: usize },
}

/// Bytes held for one review; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl MemoryBudget {
    pub fn new(capacity: usize, in_use: Gauge) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            used: Mutex::new(0),
            freed: Notify::new(),
            in_use,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes reserved right now.
    pub fn used(&self) -> usize {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty reservation, grown with [`Reservation::grow_to`].
    pub fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn try_take(&self, bytes: usize) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if *used + bytes > self.capacity {
            return false;
        }
        *used += bytes;
        self.in_use.set(*used as i64);
        true
    }

    fn give_back(&self, bytes: usize) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(bytes);
        self.in_use.set(*used as i64);
        drop(used);
        self.freed.notify_waiters();
    }
}

impl Reservation {
    /// Grows this reservation to `total` bytes, waiting until `deadline` for
    /// other reviews to give bytes back. On failure it keeps what it held.
    pub async fn grow_to(&mut self, total: usize, deadline: Instant) -> Result<(), OverBudget> {
        let Some(more) = total.checked_sub(self.bytes).filter(|m| *m > 0) else {
            return Ok(());
        };
        let capacity = self.budget.capacity;
        if total > capacity {
            return Err(OverBudget::Never {
                needed: total,
                capacity,
            });
        }
        loop {
            // Registered before the check, so a release in between wakes us.
            let freed = self.budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.budget.try_take(more) {
                self.bytes = total;
                return Ok(());
            }
            if tokio::time::timeout_at(deadline.into(), freed)
                .await
                .is_err()
            {
                return Err(OverBudget::Busy { capacity });
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The whole budget's size.
    pub fn capacity(&self) -> usize {
        self.budget.capacity
    }

    /// An empty reservation on the same budget (assigning it over this one
    /// gives this one's bytes back).
    pub fn empty(&self) -> Reservation {
        self.budget.reservation()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn reserves_up_to_the_capacity_and_gives_back_on_drop() {
        let budget = MemoryBudget::new(100, Gauge::default());
        let mut a = budget.reservation();
        a.grow_to(60, soon(10)).await.unwrap();
        let mut b = budget.reservation();
        assert_eq!(
            b.grow_to(50, soon(20)).await,
            Err(OverBudget::Busy { capacity: 100 })
        );
        assert_eq!(b.bytes(), 0);
        b.grow_to(40, soon(10)).await.unwrap();
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        let mut c = budget.reservation();
        assert_eq!(
            c.grow_to(101, soon(10)).await,
            Err(OverBudget::Never {
                needed: 101,
                capacity: 100
            })
        );
    }

    #[tokio::test]
    async fn a_waiting_review_gets_the_bytes_another_gives_back() {
        let budget = MemoryBudget::new(100, Gauge::default());
        let mut big = budget.reservation();
        big.grow_to(90, soon(10)).await.unwrap();
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let mut r = budget.reservation();
                r.grow_to(50, soon(30_000)).await.map(|_| r.bytes())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(big);
        assert_eq!(waiter.await.unwrap(), Ok(50));
        assert_eq!(budget.used(), 0);
    }
}
