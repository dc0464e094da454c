//! The records held: reading, settling, the bound, forged and deleted records.

use super::*;
use serde_json::json;

/// The record of Deployment `namespace/web<i>`, at resourceVersion `rv`.
fn record_in(namespace: &str, i: usize, rv: u64) -> ConfigMap {
    let name = name_in(namespace, i);
    serde_json::from_value(json!({
        "metadata": {"name": name, "resourceVersion": rv.to_string()},
        "data": {"apiVersion": "apps/v1", "kind": "Deployment", "resource": "deployments",
            "namespace": namespace, "name": format!("web{i}")}}))
    .unwrap()
}

fn record(i: usize) -> ConfigMap {
    record_in("prod", i, 1)
}

/// The name of [`record_in`]'s record: its object's digest.
fn name_in(namespace: &str, i: usize) -> String {
    let ar = kube::api::ApiResource {
        group: "apps".into(),
        version: "v1".into(),
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        plural: "deployments".into(),
    };
    let armed = Armed {
        ar,
        namespace: namespace.into(),
        name: format!("web{i}"),
        expires: None,
        recorded: None,
        look: None,
    };
    armed.record_name()
}

fn r(i: usize) -> String {
    name_in("prod", i)
}

/// A record found not armed is dropped only once settled, and lends
/// no pause meanwhile; one found armed is read again at its expiry.
#[test]
fn a_record_is_read_when_due_and_dropped_only_once_settled() {
    let now = jiff::Timestamp::now();
    let mut cm = record(1);
    let data = cm.data.as_mut().unwrap();
    data.insert("recorded".into(), now.to_string());
    data.insert(
        "expires".into(),
        (now + jiff::SignedDuration::from_mins(5)).to_string(),
    );
    let mut records = Records::default();
    records.update(Ok(watcher::Event::Apply(cm)));
    let held = |r: &Records| r.held.values().next().unwrap().clone_state();
    assert_eq!(
        held(&records),
        (true, false, true),
        "unread: due, not settled, may be armed"
    );
    records.read(&r(1), true, Some(now + jiff::SignedDuration::from_mins(5)));
    assert_eq!(held(&records), (false, false, true));
    let h = records.held.values().next().unwrap();
    let settled = now + jiff::SignedDuration::from_secs(71);
    assert!(!h.due(settled), "armed and settled: read at its expiry");
    assert!(
        h.due(now + jiff::SignedDuration::from_mins(6)),
        "due at its expiry"
    );
    records.read(&r(1), false, None);
    assert_eq!(
        held(&records),
        (false, false, false),
        "not armed: no pause, kept"
    );
    let h = records.held.values().next().unwrap();
    let later = now + jiff::SignedDuration::from_secs(71);
    assert!(h.settled(later) && h.due(later), "settled after the grace");
    // Recorded as armed but read unarmed: read again soon, the arming may land yet.
    let recheck = h.next_look(now).unwrap();
    assert!(
        recheck <= now + jiff::SignedDuration::from_secs(3),
        "{recheck}"
    );
    assert_eq!(
        h.next_look(later),
        None,
        "settled and not armed: dropped, not waited on"
    );
}

/// After a look-again (a write that ends the break-glass), an object
/// still read armed is read again soon; read unarmed, it lends no pause.
#[test]
fn a_look_again_is_followed_until_the_ending_lands() {
    let now = jiff::Timestamp::now();
    let mut cm = record(2);
    let data = cm.data.as_mut().unwrap();
    data.insert(
        "recorded".into(),
        (now - jiff::SignedDuration::from_mins(10)).to_string(),
    );
    data.insert("look".into(), now.to_string());
    let mut records = Records::default();
    records.update(Ok(watcher::Event::Apply(cm)));
    records.read(&r(2), true, Some(now + jiff::SignedDuration::from_mins(30)));
    let h = records.held.values().next().unwrap();
    assert!(h.next_look(now).unwrap() <= now + jiff::SignedDuration::from_secs(3));
    records.read(&r(2), false, None);
    let h = records.held.values().next().unwrap();
    assert_eq!(h.next_look(now), None);
    assert!(!h.may_be_armed() && !h.due(now));
    assert!(
        h.due(now + jiff::SignedDuration::from_secs(71)),
        "dropped once settled"
    );
}

/// A record deleted by someone else while its object may be armed is
/// handed back to be read and written again; one found unarmed is not.
#[test]
fn a_record_deleted_while_its_object_may_be_armed_is_handed_back() {
    let mut records = Records::default();
    for i in 0..3 {
        records.update(Ok(watcher::Event::Apply(record(i))));
    }
    records.read(&r(0), true, None);
    records.read(&r(1), false, None);
    // r2: not read yet, so it may be armed.
    for i in 0..3 {
        records.update(Ok(watcher::Event::Delete(record(i))));
    }
    let back: Vec<String> = (records.take_deleted().iter())
        .map(|a| a.name.clone())
        .collect();
    assert_eq!(back, ["web0", "web2"]);
    assert!(records.held.is_empty() && records.take_deleted().is_empty());
    // This sweeper's own delete leaves `held` first: nothing comes back.
    records.update(Ok(watcher::Event::Apply(record(4))));
    records.remove(&r(4));
    records.update(Ok(watcher::Event::Delete(record(4))));
    assert!(records.take_deleted().is_empty());
}

impl Held {
    /// (due now, settled now, may be armed).
    fn clone_state(&self) -> (bool, bool, bool) {
        let now = jiff::Timestamp::now();
        (self.due(now), self.settled(now), self.may_be_armed())
    }
}

#[test]
fn records_past_the_bound_are_counted_not_held() {
    let mut records = Records::default();
    records.update(Ok(watcher::Event::Init));
    for i in 0..MAX_RECORDS + 3 {
        records.update(Ok(watcher::Event::InitApply(record(i))));
    }
    records.update(Ok(watcher::Event::InitDone));
    assert_eq!((records.held.len(), records.over), (MAX_RECORDS, 3));
    // A record already held is updated in place, even at the bound.
    records.update(Ok(watcher::Event::Apply(record(0))));
    assert_eq!(records.held.len(), MAX_RECORDS);
    records.update(Ok(watcher::Event::Delete(record(0))));
    records.update(Ok(watcher::Event::Apply(record(MAX_RECORDS))));
    assert!(records.held.contains_key(&r(MAX_RECORDS)));
    // A ConfigMap that names no object is not held.
    let mut other = record(1);
    other.data = None;
    other.metadata.name = Some("other".into());
    records.update(Ok(watcher::Event::Apply(other)));
    assert!(!records.held.contains_key("other"));
}

/// A record whose name is not the digest of the object it names was
/// not written by driftguard: counted, never held.
#[test]
fn a_record_not_named_by_its_objects_digest_is_not_held() {
    let mut records = Records::default();
    let mut forged = record(1);
    forged.metadata.name = Some(r(2));
    records.update(Ok(watcher::Event::Apply(forged)));
    assert!(records.held.is_empty());
    assert_eq!(records.forged, 1);
    records.update(Ok(watcher::Event::Apply(record(1))));
    assert!(records.held.contains_key(&r(1)));
}

/// A record dated far ahead is dated when it was seen: found not
/// armed, it settles after the grace like any other, and is not read
/// again every few seconds until then is past.
#[test]
fn a_record_dated_2099_is_settled_like_any_other() {
    let now = jiff::Timestamp::now();
    let mut cm = record(3);
    let far: jiff::Timestamp = "2099-01-01T00:00:00Z".parse().unwrap();
    let data = cm.data.as_mut().unwrap();
    data.insert("recorded".into(), far.to_string());
    data.insert("look".into(), far.to_string());
    let mut records = Records::default();
    records.update(Ok(watcher::Event::Apply(cm.clone())));
    records.read(&r(3), false, None);
    let h = &records.held[&r(3)];
    assert!(h.armed.written().unwrap() <= jiff::Timestamp::now());
    let later = now + jiff::SignedDuration::from_secs(71);
    assert!(h.settled(later) && h.due(later), "settled after the grace");
    assert_eq!(h.next_look(later), None, "not read again every 3 s");
    // The same version seen again (a relist) keeps when it was seen.
    let seen = h.seen;
    records.update(Ok(watcher::Event::Init));
    records.update(Ok(watcher::Event::InitApply(cm)));
    records.update(Ok(watcher::Event::InitDone));
    assert_eq!(records.held[&r(3)].seen, seen);
}

/// A type that cannot be read is asked again less and less often.
#[test]
fn a_failing_read_backs_off() {
    let waits: Vec<Duration> = (1..10).map(failed_wait).collect();
    assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
    assert_eq!(waits[0], FAILED_WAIT);
    assert_eq!(*waits.last().unwrap(), MAX_FAILED_WAIT);
    let mut records = Records::default();
    records.update(Ok(watcher::Event::Apply(record(4))));
    assert_eq!((records.failed(&r(4)), records.failed(&r(4))), (1, 2));
    assert!(!records.held[&r(4)].due(jiff::Timestamp::now()));
}

/// A record that cannot be read gives way to one left out, but lists
/// made for that come at most once per FAILED_WAIT: records of a type
/// nothing serves are never deleted, and a list reads them all.
#[test]
fn unreadable_records_make_a_list_at_most_once_a_wait() {
    let mut records = Records::with_bound(1);
    records.update(Ok(watcher::Event::Init));
    records.update(Ok(watcher::Event::InitApply(record(1))));
    records.update(Ok(watcher::Event::InitDone));
    records.failed(&r(1));
    records.update(Ok(watcher::Event::Apply(record(2))));
    assert!(
        records.held.contains_key(&r(2)),
        "an unreadable one gives way"
    );
    assert_eq!(records.over, 1);
    records.failed(&r(2));
    assert!(!records.room_for_more(), "listed a moment ago");
    records.listed = Instant::now().checked_sub(FAILED_WAIT);
    assert!(records.room_for_more());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever records nobody armed arrive (each round up to three
    /// times the bound, over any number of namespaces, before and after
    /// a real one), as the sweeper runs (a check, a relist when some
    /// were left out, a check; a record found not armed is deleted at
    /// the next round, settled): a real record is held and found armed
    /// once the records older than it have had their turn (the bound
    /// less the real ones, a round), and never let go once armed.
    #[test]
    fn forged_records_never_keep_a_real_one_out(
        rounds in proptest::collection::vec((0usize..48, 1usize..24, 0usize..48), 1..8),
    ) {
        const MAX: usize = 16;
        let total = rounds.len();
        let mut records = Records::with_bound(MAX);
        let mut cluster: BTreeMap<String, ConfigMap> = BTreeMap::new();
        let (mut rv, mut forged_n) = (0u64, 0usize);
        // Each real record, and the round by which it must be armed.
        let mut real: Vec<(String, usize)> = Vec::new();
        let mut was_armed: Vec<String> = Vec::new();
        // Quiet rounds at the end: a flood's backlog is read through.
        let quiet = std::iter::repeat_n((0, 1, 0), 4);
        for (round, (forged, namespaces, real_at)) in rounds.into_iter().chain(quiet).enumerate() {
            let write = |records: &mut Records, cluster: &mut BTreeMap<String, ConfigMap>, cm: ConfigMap| {
                cluster.insert(cm.metadata.name.clone().unwrap(), cm.clone());
                records.update(Ok(watcher::Event::Apply(cm)));
            };
            for k in 0..=forged {
                if k == real_at.min(forged) && round < total {
                    rv += 1;
                    // Its turn comes once the records already there are
                    // read through: at least MAX - 8 (reals) a round.
                    let by = round + cluster.len().div_ceil(MAX - 8) + 2;
                    real.push((name_in("prod", round), by));
                    write(&mut records, &mut cluster, record_in("prod", round, rv));
                }
                if k < forged {
                    rv += 1;
                    forged_n += 1;
                    let ns = format!("ns{}", forged_n % namespaces);
                    write(&mut records, &mut cluster, record_in(&ns, forged_n, rv));
                }
            }
            let is_real = |name: &String| real.iter().any(|(n, _)| n == name);
            // Settled and found not armed: deleted, as the sweeper forgets it.
            let settled: Vec<String> = (records.held.iter())
                .filter(|(_, h)| h.worth() == Worth::NotArmed)
                .map(|(n, _)| n.clone())
                .collect();
            for name in settled {
                cluster.remove(&name);
                records.remove(&name);
            }
            let check = |records: &mut Records| {
                let unread: Vec<String> = (records.held.iter())
                    .filter(|(_, h)| h.read.is_none())
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in unread {
                    let armed = is_real(&name);
                    records.read(&name, armed, None);
                }
            };
            check(&mut records);
            if records.room_for_more() {
                records.update(Ok(watcher::Event::Init));
                for cm in cluster.values() {
                    records.update(Ok(watcher::Event::InitApply(cm.clone())));
                }
                records.update(Ok(watcher::Event::InitDone));
            }
            check(&mut records);
            for (name, by) in &real {
                let held = records.held.get(name).map(Held::worth);
                if round >= *by || was_armed.contains(name) {
                    proptest::prop_assert_eq!(held, Some(Worth::Armed), "round {} (due by {})", round, by);
                }
                if held == Some(Worth::Armed) && !was_armed.contains(name) {
                    was_armed.push(name.clone());
                }
            }
        }
    }
}
