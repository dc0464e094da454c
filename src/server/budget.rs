//! The byte budget: an upper bound on what clients can make the server hold,
//! charged before it is held. Each connection reserves
//! `PER_CONNECTION_BYTES` (TLS and HTTP buffers, headers capped to fit); a
//! review reserves its body's bytes as they arrive, never the length it
//! declares, and `BYTES_PER_BODY_BYTE` times its body once complete, before
//! it is parsed (one review's peak, see `scripts/review-rss.sh`).
//!
//! A review that cannot get its share before its deadline is answered by
//! `--on-error` without being parsed. Reviews that fit go ahead of larger
//! ones waiting (no FIFO), so a flood of maximal bodies cannot hold up the
//! ordinary small ones behind it. Whoever waits asks for relief first: the
//! connection registry then cuts bodies that have been arriving for longer
//! than the apiserver ever takes, so a client that sends slowly cannot keep
//! others' reviews waiting.
//!
//! A reservation that waits holds what it has (its body) meanwhile; enough
//! waiting bodies would leave room for none of them to grow. So waiters
//! together hold at most `WAITING_SHARE` of the budget, and the smallest are
//! kept: a waiter that does not fit makes a larger one give way, or is
//! refused at once if none is larger.

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
pub(crate) const BYTES_PER_BODY_BYTE: usize = 40;

/// What any review may hold beyond its body's share: an Argo CD
/// `ignore-differences` annotation at its bounds (`drift::annotated`),
/// whose pointers cost more per byte than the rest of a body. Measured with
/// `scripts/review-rss.sh` (row `configmap-annotated 32`): RSS grows in the
/// allocator's 2 MiB steps, none up to 16 long pointers, one at 24 to 32.
pub(crate) const PER_REVIEW_BYTES: usize = 2 * 1024 * 1024;

/// What a review of `body` bytes reserves before it is parsed.
pub(crate) fn review_bytes(body: usize) -> usize {
    body.saturating_mul(BYTES_PER_BODY_BYTE)
        .saturating_add(PER_REVIEW_BYTES)
}

/// What one open connection may hold, reserved when it is accepted: 50 KiB
/// measured for a served keep-alive TLS connection, 60 KiB with 15 KiB of
/// headers pending (`scripts/conn-rss.py`). Bodies are charged apart, as
/// they arrive, so 1,024 connections take at most half the default budget.
pub(crate) const PER_CONNECTION_BYTES: usize = 64 * 1024;
/// Request headers, and HTTP/1's read buffer: the apiserver sends under 1 KiB.
pub(crate) const HEADER_BYTES: usize = 16 * 1024;
/// HTTP/2 stream and connection windows: what a peer may send unread.
pub(crate) const H2_WINDOW: u32 = 64 * 1024;

/// Waiting reservations together hold at most 1/this of the budget.
pub(crate) const WAITING_SHARE: usize = 16;

/// Reservations holding up to this many bytes always wait (the apiserver's
/// reviews are a few KiB): the share is for large bodies, which a client
/// can make as many of as it likes, so a flood of small ones parked by an
/// attacker never gets the apiserver's refused at once.
pub(crate) const ALWAYS_WAITS: usize = 64 * 1024;

/// How often a waiting reservation asks for relief again: a body becomes
/// slow enough to cut while others wait.
const RELIEF_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

type Relief = Box<dyn Fn() + Send + Sync>;

/// The byte budget shared by all connections and reviews (`--memory-budget-bytes`).
pub struct MemoryBudget {
    capacity: usize,
    used: Mutex<usize>,
    freed: Notify,
    in_use: Gauge,
    /// Called when a reservation has to wait (the registry's
    /// `cut_slow_bodies`); set once, after the registry exists.
    relief: std::sync::OnceLock<Relief>,
    /// Reservations waiting to grow, with what each holds meanwhile.
    waiting: Mutex<Vec<Waiter>>,
}

struct Waiter {
    held: usize,
    /// Set when a smaller waiter made this one give way.
    refused: Arc<std::sync::atomic::AtomicBool>,
}

/// A place among the waiters; leaving it (on drop) frees the place.
struct WaitTicket<'b> {
    budget: &'b MemoryBudget,
    refused: Arc<std::sync::atomic::AtomicBool>,
}

impl WaitTicket<'_> {
    fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for WaitTicket<'_> {
    fn drop(&mut self) {
        let mut waiting = self
            .budget
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        waiting.retain(|w| !Arc::ptr_eq(&w.refused, &self.refused));
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("capacity", &self.capacity)
            .field("used", &self.used())
            .finish()
    }
}

/// Why a reservation was not granted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    /// Larger than the whole budget: it can never fit.
    #[error("the review needs {needed} bytes, more than the whole memory budget of {capacity}")]
    Never {
        /// Bytes the review needs.
        needed: usize,
        /// The whole budget.
        capacity: usize,
    },
    /// Other reviews held the budget until the deadline.
    #[error("the memory budget of {capacity} bytes stayed in use by other reviews")]
    Busy {
        /// The whole budget.
        capacity: usize,
    },
}

/// Bytes held for one review; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl MemoryBudget {
    /// A budget of `capacity` bytes, showing what is reserved in `in_use`.
    pub fn new(capacity: usize, in_use: Gauge) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            used: Mutex::new(0),
            freed: Notify::new(),
            in_use,
            relief: std::sync::OnceLock::new(),
            waiting: Mutex::new(Vec::new()),
        })
    }

    /// A place among the waiters for a reservation holding `held`, if the
    /// waiters still fit in their share once every larger one has given way.
    fn wait_with(&self, held: usize) -> Option<WaitTicket<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let share = self.capacity / WAITING_SHARE;
        if held <= ALWAYS_WAITS {
            let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
            waiting.push(Waiter {
                held: 0,
                refused: refused.clone(),
            });
            return Some(WaitTicket {
                budget: self,
                refused,
            });
        }
        let live = || waiting.iter().filter(|w| !w.refused.load(SeqCst));
        let mut total: usize = live().map(|w| w.held).sum();
        let smaller: usize = live().filter(|w| w.held <= held).map(|w| w.held).sum();
        if smaller + held > share {
            return None;
        }
        let mut evicted = false;
        while total + held > share {
            let larger = waiting
                .iter()
                .filter(|w| !w.refused.load(SeqCst) && w.held > held)
                .max_by_key(|w| w.held)?;
            larger.refused.store(true, SeqCst);
            total -= larger.held;
            evicted = true;
        }
        let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
        waiting.push(Waiter {
            held,
            refused: refused.clone(),
        });
        drop(waiting);
        if evicted {
            self.freed.notify_waiters();
        }
        Some(WaitTicket {
            budget: self,
            refused,
        })
    }

    /// What a waiting reservation calls first; later calls are ignored.
    pub(crate) fn set_relief(&self, relief: impl Fn() + Send + Sync + 'static) {
        let _ = self.relief.set(Box::new(relief));
    }

    /// `bytes` now, or `None` without waiting.
    pub(crate) fn try_reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        self.try_take(bytes).then(|| Reservation {
            budget: self.clone(),
            bytes,
        })
    }

    /// The whole budget's size.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes reserved right now.
    pub(crate) fn used(&self) -> usize {
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
        let budget = self.budget.clone();
        let mut ticket = None;
        loop {
            // Registered before the check, so a release in between wakes us.
            let freed = budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if budget.try_take(more) {
                self.bytes = total;
                return Ok(());
            }
            if ticket.is_none() {
                ticket = Some(
                    budget
                        .wait_with(self.bytes)
                        .ok_or(OverBudget::Busy { capacity })?,
                );
            }
            if ticket.as_ref().is_some_and(WaitTicket::refused) {
                return Err(OverBudget::Busy { capacity });
            }
            if let Some(relief) = budget.relief.get() {
                relief();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(OverBudget::Busy { capacity });
            }
            let _ = tokio::time::timeout_at((deadline.min(now + RELIEF_EVERY)).into(), freed).await;
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// An empty reservation on the same budget (assigning it over this one
    /// gives this one's bytes back).
    pub(crate) fn empty(&self) -> Reservation {
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

    #[tokio::test]
    async fn a_waiting_reservation_asks_for_relief_and_gets_what_it_frees() {
        let budget = MemoryBudget::new(100, Gauge::default());
        let held = std::sync::Arc::new(Mutex::new(budget.try_reserve(90)));
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        budget.set_relief({
            let (held, asked) = (held.clone(), asked.clone());
            move || {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.lock().unwrap().take();
            }
        });
        let mut r = budget.reservation();
        r.grow_to(50, soon(5_000)).await.unwrap();
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(budget.used(), 50);
        assert!(budget.try_reserve(51).is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Bodies that wait to grow, in any order, while the rest of the budget
        /// is held: together they hold at most their share; a newcomer is
        /// refused only when no waiter is larger, and makes only larger ones
        /// give way; once the budget is free again the smallest grows.
        #[test]
        fn waiters_hold_at_most_their_share_and_the_smallest_stay(
            bodies in proptest::collection::vec(0usize..400, 1..24),
        ) {
            // Large bodies, in KiB, above what always waits.
            let bodies: Vec<usize> = bodies.iter().map(|b| (b + 65) * 1024).collect();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let capacity = 16_000 * 1024;
                let budget = MemoryBudget::new(capacity, Gauge::default());
                let held: Vec<Reservation> =
                    bodies.iter().map(|b| budget.try_reserve(*b).unwrap()).collect();
                let rest = budget.try_reserve(capacity - budget.used()).unwrap();
                let mut waiting: Vec<(usize, tokio::task::JoinHandle<Result<Reservation, OverBudget>>)> = Vec::new();
                for mut r in held {
                    let body = r.bytes();
                    let task = tokio::spawn(async move {
                        r.grow_to(body + 1_000 * 1024, soon(30_000)).await.map(|_| r)
                    });
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let (gone, stay): (Vec<_>, Vec<_>) =
                        waiting.into_iter().partition(|(_, t)| t.is_finished());
                    waiting = stay;
                    // Gone: grown (with bytes the refused gave back) or given way.
                    let mut evicted = Vec::new();
                    for (b, t) in gone {
                        if t.await.unwrap().is_err() {
                            proptest::prop_assert!(b > body, "{} gave way to {}", b, body);
                            evicted.push(b);
                        }
                    }
                    if !task.is_finished() {
                        waiting.push((body, task));
                    } else if task.await.unwrap().is_err() {
                        let largest = waiting.iter().map(|(b, _)| *b).max().unwrap_or(0);
                        proptest::prop_assert!(evicted.is_empty() && body >= largest, "{} refused, {} waits", body, largest);
                    }
                    let bytes: usize = waiting.iter().map(|(b, _)| b).sum();
                    proptest::prop_assert!(bytes <= capacity / WAITING_SHARE);
                }
                drop(rest);
                if let Some((_, smallest)) = waiting.into_iter().min_by_key(|(b, _)| *b) {
                    let grown = tokio::time::timeout(Duration::from_secs(5), smallest).await;
                    proptest::prop_assert!(matches!(grown, Ok(Ok(Ok(_)))));
                }
                Ok(())
            })?;
        }
    }

    #[tokio::test]
    async fn a_small_waiter_makes_a_larger_one_give_way() {
        const K: usize = 1024;
        let capacity = 1_600 * K;
        let budget = MemoryBudget::new(capacity, Gauge::default());
        let mut big = budget.try_reserve(95 * K).unwrap();
        let mut small = budget.try_reserve(70 * K).unwrap();
        let _rest = budget.try_reserve(capacity - 165 * K).unwrap();
        let big = tokio::spawn(async move { big.grow_to(500 * K, soon(30_000)).await });
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!big.is_finished(), "95 of a 100 KiB share: it waits");
        let small = tokio::spawn(async move { small.grow_to(150 * K, soon(100)).await });
        assert_eq!(big.await.unwrap(), Err(OverBudget::Busy { capacity }));
        assert_eq!(
            small.await.unwrap(),
            Ok(()),
            "it grows into what the larger one gave back"
        );
    }

    /// Reviews the size of the apiserver's always wait, however many an
    /// attacker parks: none is refused at once for the share.
    #[tokio::test]
    async fn small_reviews_always_wait() {
        let budget = MemoryBudget::new(1 << 20, Gauge::default());
        let held: Vec<Reservation> = (0..100)
            .map(|_| {
                budget
                    .try_reserve(ALWAYS_WAITS / 2)
                    .unwrap_or_else(|| budget.reservation())
            })
            .collect();
        let _rest = budget.try_reserve(budget.capacity() - budget.used());
        let tasks: Vec<_> = held
            .into_iter()
            .map(|mut r| tokio::spawn(async move { r.grow_to(r.bytes() + 1, soon(50)).await }))
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            tasks.iter().all(|t| !t.is_finished()),
            "none refused at once"
        );
        // At the deadline each is refused, or grows into what one refused gave back.
        for t in tasks {
            assert!(matches!(
                t.await.unwrap(),
                Ok(()) | Err(OverBudget::Busy { .. })
            ));
        }
    }
}
