//! The open connections of the webhook listener, bounded by
//! `--max-connections`. When all slots are taken, a newcomer closes one that
//! does nothing useful, chosen by `choose_victim`, or is turned away when
//! its own peer would lose one and holds most slots unused (README,
//! "Connection floods": why this order). A body arriving for longer than
//! `SLOW_BODY` is slow and may be cut; each connection holds
//! `budget::PER_CONNECTION_BYTES`, and a review waiting for budget cuts slow
//! bodies and unused connections (`Connections::cut_slow`). With client
//! authentication on, a newcomer never evicts an authenticated connection.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use super::budget::{MemoryBudget, PER_CONNECTION_BYTES, Reservation};

mod victim;

pub(crate) use victim::{Snapshot, choose_victim};

/// How long an evicted connection that was told to close gracefully (an
/// HTTP/2 GOAWAY waits for the peer's ping answer) may take before it is
/// dropped, unless a request raced in and is still in flight.
pub(crate) const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// How often the accept loop looks for another victim while the one it chose
/// is still closing.
const RECHECK: Duration = Duration::from_millis(50);

/// A body still arriving after this is slow: the apiserver sends its at once.
pub(crate) const SLOW_BODY: Duration = Duration::from_secs(1);

/// Served, idle connections a peer keeps when reviews wait for budget: the
/// apiserver multiplexes over HTTP/2, and keeps a few HTTP/1 ones.
pub(crate) const IDLE_KEPT_PER_PEER: usize = 4;

/// Why a connection was told to close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseReason {
    /// Not told to close.
    None = 0,
    /// Evicted to make room for a new connection.
    Evicted = 1,
    /// The server is shutting down: finish what is in flight.
    Shutdown = 2,
    /// A slow body, or room needed: dropped at once, requests and all.
    Cut = 3,
}

/// One connection's state, shared between its task (which updates it) and
/// the registry (which reads it to choose a victim).
#[derive(Debug)]
pub(crate) struct Slot {
    id: u64,
    peer: IpAddr,
    epoch: Instant,
    /// Whether a request ever started on this connection.
    served: AtomicBool,
    in_flight: AtomicUsize,
    /// Milliseconds after `epoch` at which the connection was accepted or last
    /// became idle.
    since_ms: AtomicU64,
    /// Requests whose body is still arriving, and since when (the first).
    arriving: AtomicUsize,
    arriving_since_ms: AtomicU64,
    /// Presented a client certificate the verifier accepted.
    authenticated: AtomicBool,
    reason: AtomicU8,
    close: Notify,
    /// Its share of the byte budget, given back when the slot is.
    _charge: Reservation,
}

impl Slot {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The TLS handshake completed: idle from now on.
    pub(crate) fn handshake_done(&self) {
        self.since_ms.store(self.now_ms(), Ordering::SeqCst);
    }

    /// A request started; the connection is busy until the guard is dropped
    /// (when its response is produced, or the request is abandoned).
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.served.store(true, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    pub(crate) fn served(&self) -> bool {
        self.served.load(Ordering::SeqCst)
    }

    /// The client proved who it is (client authentication is on).
    pub(crate) fn authenticated(&self) {
        self.authenticated.store(true, Ordering::SeqCst);
    }

    /// A request's body started arriving; it counts as slow once it has
    /// been arriving for [`SLOW_BODY`], until the guard is dropped.
    pub(crate) fn arriving(self: &Arc<Self>) -> BodyArriving {
        if self.arriving.fetch_add(1, Ordering::SeqCst) == 0 {
            self.arriving_since_ms
                .store(self.now_ms(), Ordering::SeqCst);
        }
        BodyArriving(self.clone())
    }

    fn slow(&self) -> bool {
        self.arriving.load(Ordering::SeqCst) > 0
            && self
                .now_ms()
                .saturating_sub(self.arriving_since_ms.load(Ordering::SeqCst))
                >= SLOW_BODY.as_millis() as u64
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Resolves when the connection is told to close (at once if it already was).
    pub(crate) async fn closed(&self) -> CloseReason {
        self.close.notified().await;
        self.reason()
    }

    pub(crate) fn reason(&self) -> CloseReason {
        match self.reason.load(Ordering::SeqCst) {
            1 => CloseReason::Evicted,
            2 => CloseReason::Shutdown,
            3 => CloseReason::Cut,
            _ => CloseReason::None,
        }
    }

    /// Tells the task to close. A shutdown overrides an eviction, and a cut
    /// both, never the other way round.
    fn tell(&self, reason: CloseReason) {
        let previous = self.reason.fetch_max(reason as u8, Ordering::SeqCst);
        if previous < reason as u8 {
            // notify_one keeps a permit: a task not waiting yet still sees it.
            self.close.notify_one();
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            busy: self.in_flight() > 0,
            slow: self.slow(),
            closing: self.reason() != CloseReason::None,
            served: self.served(),
            authenticated: self.authenticated.load(Ordering::SeqCst),
            since_ms: self.since_ms.load(Ordering::SeqCst),
            peer: self.peer,
        }
    }

    /// Cut if slow, else closed gracefully.
    fn evict(&self) {
        self.tell(if self.slow() {
            CloseReason::Cut
        } else {
            CloseReason::Evicted
        });
    }
}

/// A request whose body is still arriving (see [`Slot::arriving`]).
pub(crate) struct BodyArriving(Arc<Slot>);

impl Drop for BodyArriving {
    fn drop(&mut self) {
        self.0.arriving.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request in flight on a connection.
pub(crate) struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        // since first: the registry never sees an idle slot with a stale time.
        self.0.since_ms.store(self.0.now_ms(), Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The registry of open connections.
pub(crate) struct Connections {
    max: usize,
    budget: Arc<MemoryBudget>,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Signalled whenever a connection ends.
    room: Notify,
    open_gauge: Gauge,
    evicted: Counter,
    turned_away: Counter,
}

/// The registry's metrics.
pub(crate) struct ConnectionMetrics {
    pub(crate) open: Gauge,
    pub(crate) evicted: Counter,
    pub(crate) turned_away: Counter,
}

impl Connections {
    /// The registry, which also relieves `budget` when reviews wait on it.
    pub(crate) fn new(
        max: usize,
        metrics: ConnectionMetrics,
        budget: Arc<MemoryBudget>,
    ) -> Arc<Self> {
        let connections = Arc::new(Self {
            max: max.max(1),
            budget: budget.clone(),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            room: Notify::new(),
            open_gauge: metrics.open,
            evicted: metrics.evicted,
            turned_away: metrics.turned_away,
        });
        let weak = Arc::downgrade(&connections);
        budget.set_relief(move || {
            if let Some(connections) = weak.upgrade() {
                connections.cut_slow();
            }
        });
        connections
    }

    /// Room for reviews waiting on the budget: every slow body is cut, every
    /// connection still unused [`SLOW_BODY`] after it was accepted (past its
    /// handshake, the apiserver sends at once) is closed, and so are the
    /// longest idle of any peer's served connections beyond its newest
    /// [`IDLE_KEPT_PER_PEER`] (authenticated ones never).
    pub(crate) fn cut_slow(&self) {
        let open = self.lock();
        let now = self.epoch.elapsed().as_millis() as u64;
        let mut idle_by_peer: HashMap<IpAddr, Vec<(u64, &Arc<Slot>)>> = HashMap::new();
        for slot in open.values() {
            let s = slot.snapshot();
            if s.closing {
                continue;
            }
            let unused = !s.served
                && !s.busy
                && now.saturating_sub(s.since_ms) >= SLOW_BODY.as_millis() as u64;
            if s.slow || unused {
                slot.evict();
                self.evicted.inc();
            } else if s.rank() == Some(2) && !s.authenticated {
                idle_by_peer
                    .entry(s.peer)
                    .or_default()
                    .push((s.since_ms, slot));
            }
        }
        for mut idle in idle_by_peer.into_values() {
            idle.sort_by_key(|(since, _)| Reverse(*since));
            for (_, slot) in idle.into_iter().skip(IDLE_KEPT_PER_PEER) {
                slot.evict();
                self.evicted.inc();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A slot for a connection just accepted from `peer`. When all are
    /// taken, tells the best victim to close and waits for room; with none
    /// to close (every connection busy), waits for one to end. `None` (turned
    /// away) when the victim would be `peer`'s own never-used connection and
    /// `peer` holds more than half the slots with such connections. Scans the
    /// connections only when full.
    pub(crate) async fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        loop {
            {
                let mut open = self.lock();
                let charge = (open.len() < self.max)
                    .then(|| self.budget.try_reserve(PER_CONNECTION_BYTES))
                    .flatten();
                if let Some(charge) = charge {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let slot = Arc::new(Slot {
                        id,
                        peer,
                        epoch: self.epoch,
                        served: AtomicBool::new(false),
                        in_flight: AtomicUsize::new(0),
                        since_ms: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
                        arriving: AtomicUsize::new(0),
                        arriving_since_ms: AtomicU64::new(0),
                        authenticated: AtomicBool::new(false),
                        reason: AtomicU8::new(CloseReason::None as u8),
                        close: Notify::new(),
                        _charge: charge,
                    });
                    open.insert(id, slot.clone());
                    self.open_gauge.set(open.len() as i64);
                    return Some(Admitted {
                        registry: self.clone(),
                        slot,
                    });
                }
                // Under the slot cap, only the budget is short: close what
                // never served or is slow, never a served idle connection
                // (the apiserver's kept-alive one may be, and a POST on a
                // connection closing under it is lost).
                let full = open.len() >= self.max;
                let victim = choose_victim(
                    open.iter()
                        .map(|(id, s)| (*id, s.snapshot()))
                        .filter(|(_, s)| full || s.rank() != Some(2)),
                );
                if let Some(slot) = victim.and_then(|id| open.get(&id)) {
                    if !slot.served() && slot.peer == peer {
                        let crowd = open
                            .values()
                            .filter(|s| s.peer == peer && !s.served())
                            .count();
                        if crowd * 2 > self.max {
                            self.turned_away.inc();
                            return None;
                        }
                    }
                    slot.evict();
                    self.evicted.inc();
                }
            }
            // A victim still closing after RECHECK (an HTTP/2 peer that does
            // not answer the GOAWAY ping) does not stall the loop: choose another.
            let _ = tokio::time::timeout(RECHECK, self.room.notified()).await;
        }
    }

    /// Tells every connection to finish what is in flight and close.
    pub(crate) fn close_all(&self) {
        for slot in self.lock().values() {
            slot.tell(CloseReason::Shutdown);
        }
    }

    /// Resolves when no connection is open.
    pub(crate) async fn all_closed(&self) {
        while !self.is_empty() {
            // A connection ending between the check and the wait leaves a permit.
            self.room.notified().await;
        }
    }

    fn release(&self, id: u64) {
        let mut open = self.lock();
        open.remove(&id);
        self.open_gauge.set(open.len() as i64);
        drop(open);
        self.room.notify_one();
    }
}

/// A connection's slot, given back when dropped (when its task ends).
pub(crate) struct Admitted {
    registry: Arc<Connections>,
    slot: Arc<Slot>,
}

impl Admitted {
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.registry.release(self.slot.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const APISERVER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    pub(super) const FLOOD: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 244, 1, 7));

    const BUSY_PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 244, 2, 9));

    /// The registry, its open gauge, and its evicted and turned-away counters.
    fn registry(max: usize) -> (Arc<Connections>, Gauge, Counter, Counter) {
        let metrics = ConnectionMetrics {
            open: Gauge::default(),
            evicted: Counter::default(),
            turned_away: Counter::default(),
        };
        let (gauge, evicted, turned_away) = (
            metrics.open.clone(),
            metrics.evicted.clone(),
            metrics.turned_away.clone(),
        );
        let budget = MemoryBudget::new(1 << 40, Gauge::default());
        (
            Connections::new(max, metrics, budget),
            gauge,
            evicted,
            turned_away,
        )
    }

    async fn admit(connections: &Arc<Connections>, peer: IpAddr) -> Admitted {
        connections.admit(peer).await.expect("admitted")
    }

    /// Which of `held` was told to close to make room, once one is.
    async fn evicted_one(held: &[Admitted]) -> usize {
        loop {
            if let Some(i) = held
                .iter()
                .position(|a| a.slot().reason() == CloseReason::Evicted)
            {
                return i;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Slots left but the budget short: a newcomer closes a connection that
    /// never served, and never the apiserver's served, kept-alive one.
    #[tokio::test]
    async fn a_short_budget_never_closes_a_served_idle_connection() {
        let metrics = ConnectionMetrics {
            open: Gauge::default(),
            evicted: Counter::default(),
            turned_away: Counter::default(),
        };
        let budget = MemoryBudget::new(2 * PER_CONNECTION_BYTES, Gauge::default());
        let connections = Connections::new(10, metrics, budget);
        let apiserver = admit(&connections, APISERVER).await;
        apiserver.slot().handshake_done();
        drop(apiserver.slot().begin());
        let other = IpAddr::from([10, 0, 0, 9]);
        let unused = admit(&connections, other).await;
        let waiter = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit(other).await }
        });
        assert_eq!(unused.slot().closed().await, CloseReason::Evicted);
        drop(unused);
        let newcomer = waiter.await.unwrap().expect("admitted");
        newcomer.slot().handshake_done();
        drop(newcomer.slot().begin());

        // Both served and idle: the next newcomer waits, closing neither.
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), connections.admit(other)).await;
        assert!(
            waiting.is_err(),
            "a served idle connection was closed for budget"
        );
        assert_eq!(apiserver.slot().reason(), CloseReason::None);
        assert_eq!(newcomer.slot().reason(), CloseReason::None);
    }

    #[tokio::test]
    async fn a_full_registry_evicts_the_oldest_idle_and_spares_the_busy() {
        let (connections, gauge, evicted, _) = registry(2);
        let first = admit(&connections, APISERVER).await;
        first.slot().handshake_done();
        let busy = first.slot().begin();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let second = admit(&connections, APISERVER).await;
        assert_eq!(gauge.get(), 2);

        // Full: the third evicts the second (idle), not the first (busy).
        let second_slot = second.slot().clone();
        let waiter = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit(APISERVER).await }
        });
        assert_eq!(second_slot.closed().await, CloseReason::Evicted);
        assert_eq!(first.slot().reason(), CloseReason::None);
        assert_eq!(evicted.get(), 1);
        drop(second);
        let third = waiter.await.unwrap();
        assert_eq!(gauge.get(), 2);
        drop(busy);
        drop((first, third));
        assert_eq!(gauge.get(), 0);
        connections.all_closed().await;
    }

    #[tokio::test]
    async fn a_flood_from_one_peer_never_evicts_another_peers_new_connection() {
        // Half the slots busy elsewhere: the flood never holds more than
        // half, so it trades its own connections rather than being turned away.
        let (connections, _, evicted, turned_away) = registry(8);
        let mut busy = Vec::new();
        for _ in 0..4 {
            let a = admit(&connections, BUSY_PEER).await;
            busy.push((a.slot().begin(), a));
        }
        let apiserver = admit(&connections, APISERVER).await;
        let mut flood = Vec::new();
        for _ in 0..3 {
            flood.push(admit(&connections, FLOOD).await);
        }
        // Each arrival from the flood evicts one of its own, many times over
        // what oldest-first would have let the apiserver's connection survive.
        for round in 0..20 {
            let next = tokio::spawn({
                let connections = connections.clone();
                async move { connections.admit(FLOOD).await.expect("admitted") }
            });
            drop(flood.remove(evicted_one(&flood).await));
            flood.push(next.await.unwrap());
            assert_eq!(
                apiserver.slot().reason(),
                CloseReason::None,
                "round {round}"
            );
        }
        assert_eq!(evicted.get(), 20);
        assert_eq!(turned_away.get(), 0);
    }

    #[tokio::test]
    async fn a_peer_holding_most_slots_unused_is_turned_away_not_traded() {
        let (connections, _, evicted, turned_away) = registry(4);
        let apiserver = admit(&connections, APISERVER).await;
        let mut flood = Vec::new();
        for _ in 0..3 {
            flood.push(admit(&connections, FLOOD).await);
        }
        // At once, without waiting for a victim to close.
        for _ in 0..20 {
            assert!(connections.admit(FLOOD).await.is_none());
        }
        assert_eq!((turned_away.get(), evicted.get()), (20, 0));
        assert!(flood.iter().all(|a| a.slot().reason() == CloseReason::None));
        // Another peer still gets in, in place of one of the flood's.
        let next = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit(BUSY_PEER).await }
        });
        drop(flood.remove(evicted_one(&flood).await));
        assert!(next.await.unwrap().is_some());
        assert_eq!(apiserver.slot().reason(), CloseReason::None);
        assert_eq!(evicted.get(), 1);
    }

    #[tokio::test]
    async fn with_every_connection_busy_admission_waits_for_one_to_end() {
        let (connections, _, evicted, _) = registry(1);
        let only = admit(&connections, APISERVER).await;
        let busy = only.slot().begin();
        let waiter = tokio::spawn({
            let connections = connections.clone();
            async move { connections.admit(APISERVER).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "admitted beyond the limit");
        assert_eq!(evicted.get(), 0);
        assert_eq!(only.slot().reason(), CloseReason::None);
        drop(busy);
        drop(only);
        let _next = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("admitted once the busy connection ended")
            .unwrap();
    }

    #[tokio::test]
    async fn shutdown_overrides_an_eviction() {
        let (connections, _, _, _) = registry(4);
        let a = admit(&connections, APISERVER).await;
        a.slot().tell(CloseReason::Evicted);
        assert_eq!(a.slot().closed().await, CloseReason::Evicted);
        connections.close_all();
        assert_eq!(a.slot().closed().await, CloseReason::Shutdown);
        a.slot().tell(CloseReason::Evicted);
        assert_eq!(a.slot().reason(), CloseReason::Shutdown);
    }
}
