//! The scan for armed objects that no record names: an arming the webhook
//! never saw (an outage with the webhook failing open, a restore by a
//! trusted identity) or one an earlier release armed before it wrote
//! records. Every type this process may list and patch (its RBAC, read in
//! one SelfSubjectRulesReview: the chart's `breakGlass.sweepRules`) is
//! listed by the break-glass label, as metadata, one page per request.
//!
//! Why paced and not all at once: a cluster may serve thousands of types.
//! The first round after this replica starts leading goes at [`MIN_PACE`]
//! (what an earlier release or an outage left armed is recorded within a
//! second per type: about a minute on a bare cluster). Later rounds start
//! at most every [`ROUND`] and spread their requests over it, never closer
//! than [`MIN_PACE`]: at most 60 requests a minute whatever the number of
//! CRDs, and an arming the webhook never saw is found within two rounds,
//! `2 × max(ROUND, types × MIN_PACE)`: 20 minutes up to 600 types, 70 at
//! 2,000 CRDs. One page of one type is held at a time.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PartialObjectMeta, PostParams};
use kube::discovery::{Discovery, Scope, verbs};

use crate::drift::breakglass_state;

/// How often a round starts, at most; its requests are spread over it.
pub(super) const ROUND: Duration = Duration::from_secs(600);
/// The shortest wait between two of the scan's requests.
pub(super) const MIN_PACE: Duration = Duration::from_secs(1);
/// Objects per list page, one page held at a time: a tenant can make each
/// object's metadata up to etcd's 1.5 MiB, so a page holds at most ~6 MiB.
const PAGE: u32 = 4;
/// Pages one listing reads per round (200 labelled objects): a type where a
/// tenant labels more is listed again namespace by namespace, each
/// namespace with this cap of its own, so decoys in one namespace cannot
/// hide another's armed objects.
const MAX_PAGES: usize = 50;
/// Records the scan writes a round, at most: what it finds armed without a
/// record may be a tenant's own doing, so its writes are bounded.
const SCAN_RECORDS: usize = 50;
/// The namespace the rules review asks about. The sweeper lists every
/// namespace at once, which only cluster-wide grants allow; a namespace no
/// one creates has no RoleBindings, so the review returns those alone.
const NO_NAMESPACE: &str = "driftguard-cluster-wide-rules";

/// One listing: a type, across namespaces or in one.
#[derive(Clone, Debug)]
struct Listing {
    ar: ApiResource,
    namespaced: bool,
    namespace: Option<String>,
    /// The continue token of the next page, and the pages read so far.
    token: String,
    pages: usize,
    /// Across namespaces: the namespaces its pages showed (at most
    /// `PAGE × MAX_PAGES`), where a crowd is if it reaches the cap.
    seen: BTreeSet<String>,
    /// Across namespaces: namespaces left out (listed on their own).
    excluded: Vec<String>,
    /// Whether it stops at [`MAX_PAGES`].
    capped: bool,
}

/// The most namespaces one listing leaves out by field selector: more, and
/// the crowd is no one namespace's; the listing then goes on uncapped.
const MAX_EXCLUDED: usize = 16;

/// Where the scan is: the listings left this round, the one being paged.
pub(super) struct Scan {
    left: VecDeque<Listing>,
    paging: Option<Listing>,
    pace: Duration,
    /// When the next request may go.
    pub next: Instant,
    next_round: Instant,
    round: Round,
    /// Rounds started since this replica began leading.
    rounds: u64,
    /// A listing across namespaces that reached [`MAX_PAGES`]: listed again
    /// without the namespaces its pages showed, and each of those on its own.
    crowded: Option<Listing>,
}

/// What one round did, logged when it ends.
#[derive(Default, Debug)]
struct Round {
    types: usize,
    refused: usize,
    found: usize,
    recorded: usize,
}

impl Default for Scan {
    fn default() -> Self {
        let now = Instant::now();
        Scan {
            left: VecDeque::new(),
            paging: None,
            pace: MIN_PACE,
            next: now,
            next_round: now,
            round: Round::default(),
            rounds: 0,
            crowded: None,
        }
    }
}

impl Scan {
    /// Lets the next round start at the next step (tests: a round's time passed).
    #[cfg(test)]
    pub(super) fn round_now(&mut self) {
        self.next_round = Instant::now();
        self.left.clear();
        self.paging = None;
    }

    /// Whether the scan may write one more record this round (counted).
    pub(super) fn may_record(&mut self) -> bool {
        if self.round.recorded == SCAN_RECORDS {
            tracing::warn!(
                max = SCAN_RECORDS,
                "break-glass sweeper: the scan found more armed objects without a record than it records a round; the rest wait for the next round"
            );
        }
        self.round.recorded += 1;
        self.round.recorded <= SCAN_RECORDS
    }

    /// Makes one request of the scan (a round's start makes a few more:
    /// the rules review and aggregated discovery) and hands each labelled
    /// object found to `found`,
    /// as `(type, metadata)`.
    pub(super) async fn step(
        &mut self,
        client: &kube::Client,
        mut found: impl FnMut(&ApiResource, PartialObjectMeta<DynamicObject>),
    ) {
        if let Some(crowded) = self.crowded.take() {
            // Next, before the other types: the crowded type is still being read.
            for listing in split(crowded).into_iter().rev() {
                self.left.push_front(listing);
            }
        }
        let mut listing = match self.paging.take().or_else(|| self.left.pop_front()) {
            Some(listing) => listing,
            None => {
                self.start_round(client, Instant::now()).await;
                return;
            }
        };
        let api = match &listing.namespace {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, &listing.ar),
            None => Api::<DynamicObject>::all_with(client.clone(), &listing.ar),
        };
        let mut params = ListParams::default()
            .labels(breakglass_state::LABEL)
            .limit(PAGE);
        if !listing.excluded.is_empty() {
            let not: Vec<String> = (listing.excluded.iter())
                .map(|ns| format!("metadata.namespace!={ns}"))
                .collect();
            params = params.fields(&not.join(","));
        }
        if !listing.token.is_empty() {
            params = params.continue_token(&listing.token);
        }
        let listed = api.list_metadata(&params).await;
        // Paced from the answer: a retry inside the client (a 429 while a
        // new type's cache fills) counts against the same second. A type's
        // later pages come at once, the next type at the round's pace.
        let ar = listing.ar.clone();
        match listed {
            Ok(page) => {
                self.round.found += page.items.len();
                if listing.namespace.is_none() {
                    let namespaces = page
                        .items
                        .iter()
                        .filter_map(|m| m.metadata.namespace.clone());
                    listing.seen.extend(namespaces);
                }
                page.items.into_iter().for_each(|meta| found(&ar, meta));
                listing.pages += 1;
                match page.metadata.continue_.filter(|t| !t.is_empty()) {
                    Some(token) if listing.capped && listing.pages >= MAX_PAGES => {
                        listing.token = token;
                        self.crowded(listing);
                    }
                    Some(token) => {
                        listing.token = token;
                        self.paging = Some(listing);
                    }
                    None => {}
                }
            }
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
                self.round.refused += 1;
                tracing::debug!(r#type = %ar.plural, group = %ar.group, code = s.code, "break-glass sweeper: the scan cannot list a type");
            }
            Err(e) => {
                self.round.refused += 1;
                tracing::warn!(r#type = %ar.plural, group = %ar.group, error = %e, "break-glass sweeper: the scan cannot list a type; the next round tries again");
            }
        }
        let pace = if self.paging.is_some() {
            MIN_PACE
        } else {
            self.pace
        };
        self.next = Instant::now() + pace;
    }

    /// A listing that reached [`MAX_PAGES`]: across namespaces (of a
    /// namespaced type), it is split ([`split`]) at the next step; in one
    /// namespace, or of a cluster-scoped type, the rest waits (logged).
    fn crowded(&mut self, listing: Listing) {
        let ar = &listing.ar;
        match &listing.namespace {
            None if listing.namespaced => {
                tracing::warn!(r#type = %ar.plural, group = %ar.group, namespaces = ?listing.seen, "break-glass sweeper: more objects carry the break-glass label than one listing reads; listing the namespaces they are in apart");
                self.crowded = Some(listing);
            }
            None => {
                tracing::warn!(r#type = %ar.plural, group = %ar.group, "break-glass sweeper: more objects of this cluster-scoped type carry the break-glass label than one listing reads; the rest wait for a later round")
            }
            Some(ns) => {
                tracing::warn!(r#type = %ar.plural, group = %ar.group, namespace = %ns, "break-glass sweeper: more objects in this namespace carry the break-glass label than one listing reads; the rest wait for a later round")
            }
        }
    }

    /// Ends the round done (logged) and, once [`ROUND`] has passed since
    /// it began, starts the next: the types this process may list and
    /// patch, paced to spread over [`ROUND`].
    async fn start_round(&mut self, client: &kube::Client, now: Instant) {
        if now < self.next_round {
            self.next = self.next_round;
            return;
        }
        if self.round.types > 0 {
            tracing::info!(
                types = self.round.types,
                refused = self.round.refused,
                labelled = self.round.found,
                recorded = self.round.recorded.min(SCAN_RECORDS),
                "break-glass sweeper: scanned every type it may sweep for armed objects"
            );
        }
        self.round = Round::default();
        self.next_round = now + ROUND;
        self.next = self.next_round;
        let types = match sweepable_types(client).await {
            Ok(types) => types,
            Err(e) => {
                tracing::warn!(error = %e, "break-glass sweeper: cannot read the types it may sweep (discovery and a SelfSubjectRulesReview); the scan for armed objects without a record waits a round");
                return;
            }
        };
        self.round.types = types.len();
        let left: VecDeque<Listing> = (types.into_iter())
            .map(|(ar, namespaced)| Listing {
                ar,
                namespaced,
                namespace: None,
                token: String::new(),
                pages: 0,
                seen: BTreeSet::new(),
                excluded: Vec::new(),
                capped: true,
            })
            .collect();
        self.pace = match self.rounds {
            0 => MIN_PACE,
            _ => pace(left.len()),
        };
        self.rounds += 1;
        self.left = left;
        self.next = now;
    }
}

/// A crowded listing across namespaces, split so that decoys in one
/// namespace hide nothing of another's: the type again without the
/// namespaces its pages showed (by field selector, which needs no grant on
/// Namespaces), then each of those on its own, capped. Showing more than
/// [`MAX_EXCLUDED`] namespaces, the crowd is no one's: it goes on uncapped.
fn split(crowded: Listing) -> Vec<Listing> {
    let mut excluded = crowded.excluded.clone();
    excluded.extend(crowded.seen.iter().cloned());
    if excluded.len() > MAX_EXCLUDED {
        tracing::warn!(r#type = %crowded.ar.plural, "break-glass sweeper: objects carrying the break-glass label are spread over many namespaces; listing them all");
        return vec![Listing {
            capped: false,
            ..crowded
        }];
    }
    let fresh = |namespace: Option<String>, excluded: Vec<String>| Listing {
        ar: crowded.ar.clone(),
        namespaced: true,
        namespace,
        token: String::new(),
        pages: 0,
        seen: BTreeSet::new(),
        excluded,
        capped: true,
    };
    let mut out = vec![fresh(None, excluded)];
    out.extend((crowded.seen.iter()).map(|ns| fresh(Some(ns.clone()), Vec::new())));
    out
}

/// The wait between two requests that spreads `types` over a round.
pub(super) fn pace(types: usize) -> Duration {
    let per = ROUND.checked_div(u32::try_from(types).unwrap_or(u32::MAX).max(1));
    per.unwrap_or(MIN_PACE).max(MIN_PACE)
}

/// Every served type, at its most stable version, that this process may
/// list across namespaces, get and patch, by discovery and its own rules;
/// with whether it is namespaced.
async fn sweepable_types(client: &kube::Client) -> Result<Vec<(ApiResource, bool)>, kube::Error> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(NO_NAMESPACE.to_owned()),
        },
        ..Default::default()
    };
    let rules = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .unwrap_or_default();
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => discovery,
        Err(_) => Discovery::new(client.clone()).run().await?,
    };
    let mut types = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.resources_by_stability() {
            let served = caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::PATCH)
                && matches!(caps.scope, Scope::Namespaced | Scope::Cluster);
            // An authorizer that cannot list its rules (incomplete): every
            // type is tried, and a refusal is counted.
            if served && (rules.incomplete || allowed(&rules.resource_rules, &ar)) {
                types.push((ar, caps.scope == Scope::Namespaced));
            }
        }
    }
    Ok(types)
}

/// Whether `rules` allow `list`, `get` and `patch` on every object of `ar`:
/// what finding, reading again and ending an armed object take.
pub(super) fn allowed(rules: &[ResourceRule], ar: &ApiResource) -> bool {
    let grants = |verb: &str| {
        rules.iter().any(|rule| {
            let any = |list: &Option<Vec<String>>, want: &str| {
                (list.iter().flatten()).any(|item| item == "*" || item == want)
            };
            rule.resource_names.as_ref().is_none_or(Vec::is_empty)
                && rule.verbs.iter().any(|v| v == "*" || v == verb)
                && any(&rule.api_groups, &ar.group)
                && any(&rule.resources, &ar.plural)
        })
    };
    grants(verbs::LIST) && grants(verbs::GET) && grants(verbs::PATCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> ResourceRule {
        let strings = |items: &[&str]| Some(items.iter().map(|s| (*s).to_owned()).collect());
        ResourceRule {
            api_groups: strings(groups),
            resources: strings(resources),
            verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
            resource_names: (!names.is_empty()).then(|| strings(names)).flatten(),
        }
    }

    fn ar(group: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "K".into(),
            plural: plural.into(),
        }
    }

    /// The scan lists only what the sweeper may also end: list and patch,
    /// on every object of the type, as the chart's sweepRules grant them.
    #[test]
    fn a_type_is_scanned_when_its_rules_grant_list_and_patch_on_every_object() {
        let star = [rule(&["*"], &["*"], &["*"], &[])];
        assert!(allowed(&star, &ar("apps", "deployments")));
        let narrowed = [rule(&[""], &["configmaps"], &["get", "list", "patch"], &[])];
        let no_get = [rule(&[""], &["configmaps"], &["list", "patch"], &[])];
        assert!(!allowed(&no_get, &ar("", "configmaps")));
        assert!(allowed(&narrowed, &ar("", "configmaps")));
        assert!(!allowed(&narrowed, &ar("", "secrets")));
        assert!(!allowed(&narrowed, &ar("apps", "configmaps")));
        let split = [
            rule(&["apps"], &["deployments"], &["get", "list"], &[]),
            rule(&["apps"], &["deployments"], &["patch"], &[]),
        ];
        assert!(allowed(&split, &ar("apps", "deployments")));
        let read_only = [rule(&["*"], &["*"], &["get", "list", "watch"], &[])];
        assert!(!allowed(&read_only, &ar("apps", "deployments")));
        let named = [rule(&[""], &["configmaps"], &["*"], &["settings"])];
        assert!(!allowed(&named, &ar("", "configmaps")));
    }

    /// A crowded listing is listed again without the namespaces its pages
    /// showed, each of those apart; spread over too many, it goes on whole.
    #[test]
    fn a_crowded_listing_leaves_its_crowds_namespaces_to_listings_of_their_own() {
        let crowded = |seen: &[&str]| Listing {
            ar: ar("", "configmaps"),
            namespaced: true,
            namespace: None,
            token: "t".into(),
            pages: MAX_PAGES,
            seen: seen.iter().map(|s| (*s).to_owned()).collect(),
            excluded: vec!["earlier".into()],
            capped: true,
        };
        let parts = split(crowded(&["aaa-decoys"]));
        let shown: Vec<(Option<String>, Vec<String>, bool)> = (parts.iter())
            .map(|l| (l.namespace.clone(), l.excluded.clone(), l.token.is_empty()))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    None,
                    vec!["earlier".to_owned(), "aaa-decoys".to_owned()],
                    true
                ),
                (Some("aaa-decoys".to_owned()), vec![], true)
            ]
        );
        let many: Vec<String> = (0..MAX_EXCLUDED).map(|i| format!("ns-{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let parts = split(crowded(&many));
        assert_eq!(parts.len(), 1);
        assert!(
            !parts[0].capped && parts[0].token == "t",
            "goes on from where it was"
        );
    }

    /// Requests a minute stay at most 60 whatever the number of types, and
    /// a round of a few types still takes [`ROUND`].
    #[test]
    fn the_pace_spreads_a_round_and_bounds_requests_a_minute() {
        for types in [0, 1, 70, 600, 601, 2_070, 100_000] {
            let pace = pace(types);
            assert!(pace >= MIN_PACE, "{types}: {pace:?}");
            let round = pace * u32::try_from(types.max(1)).unwrap();
            let almost = ROUND - Duration::from_millis(1);
            assert!(
                round >= almost || types == 0,
                "{types}: a round of {round:?}"
            );
            if types <= 600 {
                assert!(round <= ROUND + MIN_PACE, "{types}: {round:?}");
            }
        }
    }
}
