//! Which connection to close to make room: a pure choice over snapshots
//! of the open connections (README, "Connection floods": why this order).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::net::IpAddr;

/// What the eviction choice looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) busy: bool,
    /// A body has been arriving for [`SLOW_BODY`](super::SLOW_BODY) or longer.
    pub(crate) slow: bool,
    pub(crate) closing: bool,
    pub(crate) served: bool,
    pub(crate) authenticated: bool,
    pub(crate) since_ms: u64,
    pub(crate) peer: IpAddr,
}

impl Snapshot {
    /// Which to close first: 0 never served and idle, 1 slow, 2 served and
    /// idle; `None` for busy (and not slow) or closing.
    pub(super) fn rank(&self) -> Option<u8> {
        match (self.closing, self.slow, self.busy, self.served) {
            (true, ..) => None,
            (_, true, ..) => Some(1),
            (_, _, true, _) => None,
            (.., false) => Some(0),
            (.., true) => Some(2),
        }
    }
}

/// The connection to close to make room for an unauthenticated newcomer:
/// those that never served a request first, then slow bodies, then those
/// idle after serving; within each, from the peer holding the most of that
/// group; then the longest idle (or longest in its handshake). Busy,
/// closing and authenticated connections are never chosen.
pub(crate) fn choose_victim(slots: impl IntoIterator<Item = (u64, Snapshot)>) -> Option<u64> {
    let candidates: Vec<(u64, u8, Snapshot)> = slots
        .into_iter()
        .filter(|(_, s)| !s.authenticated)
        .filter_map(|(id, s)| Some((id, s.rank()?, s)))
        .collect();
    let mut crowds: HashMap<(u8, IpAddr), usize> = HashMap::new();
    for (_, rank, s) in &candidates {
        *crowds.entry((*rank, s.peer)).or_default() += 1;
    }
    candidates
        .into_iter()
        .min_by_key(|(id, rank, s)| {
            let crowd = crowds[&(*rank, s.peer)];
            (*rank, Reverse(crowd), s.since_ms, *id)
        })
        .map(|(id, ..)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::connections::tests::{APISERVER, FLOOD};

    fn snap(busy: bool, closing: bool, served: bool, since_ms: u64) -> Snapshot {
        from(APISERVER, busy, closing, served, since_ms)
    }

    fn from(peer: IpAddr, busy: bool, closing: bool, served: bool, since_ms: u64) -> Snapshot {
        Snapshot {
            busy,
            slow: false,
            closing,
            served,
            authenticated: false,
            since_ms,
            peer,
        }
    }

    #[test]
    fn the_oldest_connection_doing_nothing_is_chosen() {
        let slots = [
            (1, snap(false, false, false, 300)),
            (2, snap(false, false, false, 100)),
            (3, snap(false, false, false, 200)),
        ];
        assert_eq!(choose_victim(slots), Some(2));
    }

    #[test]
    fn busy_and_closing_connections_are_never_chosen() {
        let slots = [
            (1, snap(true, false, true, 0)),
            (2, snap(false, true, false, 1)),
            (3, snap(false, false, true, 500)),
        ];
        assert_eq!(choose_victim(slots), Some(3));
        let all_busy = [
            (1, snap(true, false, true, 0)),
            (2, snap(true, false, true, 9)),
        ];
        assert_eq!(choose_victim(all_busy), None);
        assert_eq!(choose_victim([]), None);
    }

    #[test]
    fn a_connection_that_served_goes_after_every_one_that_never_did() {
        // The apiserver's kept-alive connection, idle for long, against a
        // handshake that started a moment ago.
        let slots = [
            (1, snap(false, false, true, 0)),
            (2, snap(false, false, false, 10_000)),
        ];
        assert_eq!(choose_victim(slots), Some(2));
    }

    #[test]
    fn the_peer_holding_most_new_connections_loses_one_first() {
        // The apiserver's new connection is the oldest doing nothing, yet
        // the flood's newest goes first.
        let slots = [
            (1, from(APISERVER, false, false, false, 0)),
            (2, from(FLOOD, false, false, false, 50)),
            (3, from(FLOOD, false, false, false, 40)),
            (4, from(FLOOD, true, false, true, 1)),
        ];
        assert_eq!(choose_victim(slots), Some(3));
        // Connections that served never count towards their peer's crowd,
        // nor are chosen while one that never served remains.
        let slots = [
            (1, from(APISERVER, false, false, false, 30)),
            (2, from(FLOOD, false, false, true, 0)),
            (3, from(FLOOD, false, false, true, 1)),
        ];
        assert_eq!(choose_victim(slots), Some(1));
        // Equal crowds: oldest first.
        let slots = [
            (1, from(APISERVER, false, false, false, 30)),
            (2, from(FLOOD, false, false, false, 20)),
        ];
        assert_eq!(choose_victim(slots), Some(2));
        // Among connections that served: the apiserver's kept-alive one,
        // idle the longest, outlasts a pod's crowd of idle ones.
        let slots = [
            (1, from(APISERVER, false, false, true, 0)),
            (2, from(APISERVER, false, false, true, 5)),
            (3, from(FLOOD, false, false, true, 900)),
            (4, from(FLOOD, false, false, true, 800)),
            (5, from(FLOOD, false, false, true, 700)),
        ];
        assert_eq!(choose_victim(slots), Some(5));
    }

    #[test]
    fn slow_bodies_go_after_unused_connections_and_before_served_idle_ones() {
        let slow = |since| Snapshot {
            busy: true,
            slow: true,
            ..snap(true, false, true, since)
        };
        let slots = [
            (1, snap(false, false, true, 0)),
            (2, slow(50)),
            (3, snap(true, false, true, 0)),
        ];
        assert_eq!(choose_victim(slots), Some(2));
        let slots = [(1, slow(0)), (2, snap(false, false, false, 90))];
        assert_eq!(choose_victim(slots), Some(2));
        // Authenticated connections are never traded for a newcomer.
        let authenticated = |s: Snapshot| Snapshot {
            authenticated: true,
            ..s
        };
        let slots = [
            (1, authenticated(snap(false, false, false, 0))),
            (2, authenticated(slow(0))),
        ];
        assert_eq!(choose_victim(slots), None);
    }
}
