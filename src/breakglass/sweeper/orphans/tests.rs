use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const GRACE: Duration = Duration::from_secs(20);
const INTERVAL: Duration = Duration::from_secs(15);
const REAL: &str = "apps/Deployment:production/web";

fn key(hub: bool, namespace: &str, app: &str, entry: &str) -> Orphan {
    (hub, namespace.into(), app.into(), entry.into())
}

/// A hub tenant's forged entries: `apps[i]` Applications in namespace
/// `tenant-i` (`in_argocd`: in Argo CD's own namespace instead), each
/// listing `entries` objects no armed object holds.
fn forged(apps: &[usize], entries: usize, in_argocd: bool) -> BTreeSet<Orphan> {
    let mut out = BTreeSet::new();
    for (i, n) in apps.iter().enumerate() {
        // "a-…" sorts before "argocd": the order that starved the old pass.
        let namespace = if in_argocd {
            "argocd".to_owned()
        } else {
            format!("a-tenant-{i}")
        };
        for a in 0..*n {
            for e in 0..entries {
                out.insert(key(
                    true,
                    &namespace,
                    &format!("a{i}-{a}"),
                    &format!("x/K:t/o{e}"),
                ));
            }
        }
    }
    out
}

/// What a run of passes did: the pass the real entry was lifted in (from
/// the first, 1), and the warnings each forged entry drew.
struct Run {
    lifted_in: Option<usize>,
    warnings: BTreeMap<Orphan, usize>,
    /// Every try, as (pass, entry).
    tries: Vec<(usize, Orphan)>,
    /// The passes that warned, once per warning.
    warned_in: Vec<usize>,
}

/// `passes` passes, one per [`INTERVAL`], starting past the grace, over
/// `forged` (refused every time) and the real entry on the hub's
/// argocd/web (lifted when tried).
fn run(forged: &BTreeSet<Orphan>, budget: usize, passes: usize) -> Run {
    let real = key(true, "argocd", "web", REAL);
    let mut orphans = Orphans::default();
    let mut now = Instant::now();
    let mut out = Run {
        lifted_in: None,
        warnings: BTreeMap::new(),
        tries: Vec::new(),
        warned_in: Vec::new(),
    };
    for pass in 1..=passes {
        let mut found = forged.clone();
        if out.lifted_in.is_none() {
            found.insert(real.clone());
        }
        orphans.found(now, found, BTreeSet::new());
        if pass == 1 {
            orphans.age(GRACE);
        }
        for k in orphans.due(now, GRACE, budget) {
            out.tries.push((pass, k.clone()));
            if k == real {
                orphans.settled(&k);
                out.lifted_in = Some(pass);
            } else if orphans.wait(&k, now, INTERVAL) {
                *out.warnings.entry(k).or_default() += 1;
                out.warned_in.push(pass);
            }
        }
        now += INTERVAL;
    }
    out
}

/// The reproduction: 4 Applications in a namespace that sorts
/// before argocd, 64 forged entries each (all 256 of a pass's slots under
/// the first-in-sort-order pass): the real pause is lifted in the first pass.
#[test]
fn a_tenant_filling_a_pass_does_not_starve_argocd_web() {
    let forged = forged(&[4], 64, false);
    let r = run(&forged, 256, 20);
    assert_eq!(r.lifted_in, Some(1));
    // The first pass shared: the forged ones took the rest, not all.
    let first = r.tries.iter().filter(|(p, _)| *p == 1).count();
    assert_eq!(first, 256);
    // Each forged entry warned about at most once in the run (5 minutes),
    // and at most WARNINGS_PER_PASS a pass: in passes 1, 2, 4, 8 and 16,
    // when the refused entries were tried.
    assert!(
        r.warnings.values().all(|n| *n == 1),
        "{:?}",
        r.warnings.values().max()
    );
    assert_eq!(r.warnings.len(), 5 * WARNINGS_PER_PASS);
}

/// Entries refused wait: none is tried again before its backoff, and the
/// backoff doubles up to its bound.
#[test]
fn a_refused_entry_waits_doubling_up_to_the_bound() {
    assert_eq!(backoff(INTERVAL, 0), INTERVAL);
    assert_eq!(backoff(INTERVAL, 3), INTERVAL * 8);
    assert_eq!(backoff(INTERVAL, 40), MAX_BACKOFF);
    let forged = forged(&[1], 1, false);
    let r = run(&forged, 256, 40);
    let passes: Vec<usize> = r
        .tries
        .iter()
        .filter(|(_, k)| k.3 != REAL)
        .map(|(p, _)| *p)
        .collect();
    // Tried in passes 1, 2, 4, 8, 16, 32: waits of 1, 2, 4, 8, 16 intervals.
    assert_eq!(passes, [1, 2, 4, 8, 16, 32]);
}

/// An Application that holds none of ours waits as a whole, unwarned.
#[test]
fn an_application_not_ours_waits_whole() {
    let mut orphans = Orphans::default();
    let now = Instant::now();
    let mut found: BTreeSet<Orphan> = (0..3)
        .map(|i| key(true, "argocd", "other", &format!("x/K:a/{i}")))
        .collect();
    // Its neighbours in the map's order are not its entries.
    let neighbours = [
        key(true, "argocd", "othe", REAL),
        key(true, "argocd", "other2", REAL),
        key(false, "argocd", "other", REAL),
    ];
    found.extend(neighbours.clone());
    orphans.found(now, found, BTreeSet::new());
    orphans.age(GRACE);
    orphans.wait_app(&(true, "argocd".into(), "other".into()), now, INTERVAL);
    let others: BTreeSet<Orphan> = orphans.due(now, GRACE, 256).into_iter().collect();
    assert_eq!(others, neighbours.into());
    // Past its wait, its entries come due again (beside the neighbours, never told to wait).
    let later = orphans.due(now + INTERVAL, GRACE, 256);
    let of_other = later.iter().filter(|k| k.0 && k.2 == "other").count();
    assert_eq!((of_other, later.len()), (3, 6));
}

/// A cluster that could not be listed keeps what was seen there, untried.
#[test]
fn an_unlisted_cluster_keeps_its_entries_untried() {
    let mut orphans = Orphans::default();
    let now = Instant::now();
    let hub = key(true, "argocd", "web", REAL);
    let here = key(false, "argocd", "web", REAL);
    orphans.found(now, [hub.clone(), here.clone()].into(), BTreeSet::new());
    orphans.age(GRACE);
    orphans.found(now, [here.clone()].into(), [true].into());
    assert_eq!(orphans.len(), 2);
    assert_eq!(orphans.due(now, GRACE, 256), [here]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Generated tenants: forged entries in several namespaces, or in Argo
    /// CD's own beside web, whatever the pass's budget. The real entry is
    /// lifted within a bound that depends only on how many namespaces (or,
    /// in one namespace, Applications) there are, never on how many entries
    /// they forge: ceil(namespaces / budget) passes, or ceil(Applications /
    /// budget). Each forged entry is warned about at most once, and never
    /// tried again inside its backoff.
    #[test]
    fn the_real_entry_is_lifted_within_a_bound(
        apps in prop::collection::vec(1usize..6, 1..8),
        entries in 1usize..=64,
        in_argocd in any::<bool>(),
        budget in 1usize..300,
    ) {
        let forged = forged(&apps, entries, in_argocd);
        let turns = if in_argocd { apps.iter().sum::<usize>() + 1 } else { apps.len() + 1 };
        let bound = turns.div_ceil(budget);
        let r = run(&forged, budget, bound + 1);
        prop_assert!(r.lifted_in.is_some_and(|p| p <= bound),
            "lifted in {:?}, bound {bound}", r.lifted_in);
        prop_assert!(r.warnings.values().all(|n| *n == 1));
        for pass in 1..=bound + 1 {
            let n = r.warned_in.iter().filter(|p| **p == pass).count();
            prop_assert!(n <= WARNINGS_PER_PASS, "{n} warnings in pass {pass}");
        }
        let mut last: BTreeMap<&Orphan, (usize, u32)> = BTreeMap::new();
        for (pass, k) in &r.tries {
            if let Some((at, failed)) = last.get(k) {
                let waited = (pass - at) as u32;
                let backoff = (1u32 << failed.min(&16)).min(60);
                prop_assert!(waited >= backoff, "{k:?} tried again after {waited}");
            }
            let failed = last.get(k).map_or(0, |(_, f)| f + 1);
            last.insert(k, (*pass, failed));
        }
    }
}
