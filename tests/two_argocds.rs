//! A hub's Argo CD and this cluster's own at once (`--local-argocd-namespace`,
//! issue 24): each object gets the rules of the installation that tracks it,
//! by Argo CD's `installation-id` rule, and never the other's. Both have an
//! Application named `myapp`, on purpose.

use driftguard_testkit::common;

use std::sync::Arc;

use common::*;
use driftguard::Policy;
use driftguard::drift::{ArgoCdSources, Decision, Finding, Verdict};
use driftguard::policy::impersonation::AppProject;
use driftguard::sources::{Sources, applications, sync_accounts};
use serde_json::{Value, json};

const IMAGE: &str = "/spec/template/spec/containers/0/image";
const REPLICAS: &str = "/spec/replicas";
const ID: &str = "/metadata/annotations/argocd.argoproj.io~1installation-id";
const DEPLOYER: &str = "system:serviceaccount:team-prod:deployer";

/// Application `myapp` in `control_plane`, from repository
/// `https://git.example.com/<control_plane>.git`, deploying into
/// `destination` and ignoring `pointer` on Deployments.
fn application(control_plane: &str, destination: &str, pointer: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": "myapp", "namespace": control_plane},
           "spec": {"project": "shop",
                    "source": {"repoURL": format!("https://git.example.com/{control_plane}.git"), "path": "app"},
                    "destination": {"server": "https://kubernetes.default.svc", "namespace": destination},
                    "ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": [pointer]}]}})
}

/// One installation: its `myapp`, its id, and with `sync_as`, sync
/// impersonation on and `myapp` synced as that account of its destination.
fn installation(
    control_plane: &str,
    id: Option<&str>,
    (destination, pointer): (&str, &str),
    sync_as: Option<&str>,
) -> ArgoCdSources {
    let (apps, errors) = applications(&[application(control_plane, destination, pointer)]);
    assert!(errors.is_empty(), "{errors:?}");
    let project = sync_as.map(|account| {
        AppProject::from_value(&json!({"metadata": {"name": "shop", "namespace": control_plane},
            "spec": {"destinationServiceAccounts": [
                {"server": "https://kubernetes.default.svc", "namespace": destination, "defaultServiceAccount": account}]}}))
        .unwrap()
    });
    let accounts = sync_accounts(&apps, project.as_slice(), sync_as.is_some(), control_plane);
    ArgoCdSources {
        applications: apps.into_iter().map(Arc::new).collect(),
        sync_accounts: accounts.into_iter().map(Arc::new).collect(),
        namespace: control_plane.to_owned(),
        installation_id: id.map(str::to_owned),
        ..ArgoCdSources::default()
    }
}

/// The hub's Argo CD (id `hub`, ignores replicas) and this cluster's own
/// (id `team`, ignores the image, syncs as `deployer`).
fn both(hub_id: Option<&str>, team_id: Option<&str>) -> Sources {
    Sources {
        argocd: vec![
            installation("argocd", hub_id, ("production", REPLICAS), None),
            installation(
                "team-argocd",
                team_id,
                ("team-prod", IMAGE),
                Some("deployer"),
            ),
        ],
        ..Sources::default()
    }
}

fn judged(review: &Review, sources: &Sources) -> Decision {
    decided_with(&Policy::embedded(), review, sources)
}

fn tracked_by(id: Option<&str>) -> Value {
    match id {
        Some(id) => with(&deployment(), ID, json!(id)),
        None => deployment(),
    }
}

fn changed(old: &Value, pointer: &str, value: Value) -> Review {
    Review::update(old.clone(), with(old, pointer, value))
}

/// What the denial says of the manager, and the decision's notes.
fn said(d: &Decision) -> String {
    format!("{:?} {:?} {:?}", d.manager, d.source, d.notes)
}

#[test]
fn each_object_gets_the_rules_of_the_installation_that_tracks_it() {
    let sources = both(Some("hub"), Some("team"));
    let hubs = tracked_by(Some("hub"));
    let scaled = judged(&changed(&hubs, REPLICAS, json!(5)), &sources);
    assert_eq!(scaled.verdict, Verdict::Allow, "{}", said(&scaled));
    let image = judged(&changed(&hubs, IMAGE, json!("web:2")), &sources);
    assert_eq!(image.verdict, Verdict::Deny);
    assert!(
        said(&image).contains("git.example.com/argocd.git"),
        "the hub's Application is named: {}",
        said(&image)
    );

    let teams = tracked_by(Some("team"));
    let image = judged(&changed(&teams, IMAGE, json!("web:2")), &sources);
    assert_eq!(image.verdict, Verdict::Allow, "{}", said(&image));
    let scaled = judged(&changed(&teams, REPLICAS, json!(5)), &sources);
    assert_eq!(scaled.verdict, Verdict::Deny);
    assert!(
        said(&scaled).contains("git.example.com/team-argocd.git"),
        "the team's Application is named: {}",
        said(&scaled)
    );
}

/// Argo CD claims an object only with exactly its id: one with none, or an
/// unknown one, is neither installation's, and gets the policy's rules alone.
#[test]
fn an_object_neither_installation_claims_gets_neither_rules() {
    let sources = both(Some("hub"), Some("team"));
    for id in [None, Some("elsewhere")] {
        let old = tracked_by(id);
        for pointer in [REPLICAS, IMAGE] {
            let d = judged(&changed(&old, pointer, json!("x")), &sources);
            assert_eq!(d.verdict, Verdict::Deny, "{id:?} {pointer}");
            assert!(
                said(&d).contains("another Argo CD installation"),
                "{}",
                said(&d)
            );
        }
    }
    // Each id alone still claims its own: the one without an id.
    let only_team = both(Some("hub"), None);
    let d = judged(&changed(&deployment(), IMAGE, json!("web:2")), &only_team);
    assert_eq!(d.verdict, Verdict::Allow, "{}", said(&d));
}

/// Two installations with one id cannot be told apart: the union of their
/// rules would be the looser reading, so neither applies. One without an id
/// tracks every object (Argo CD v3.6.1), also those with the other's id.
#[test]
fn two_installations_sharing_an_id_lend_neither_their_rules() {
    for (hub, team, object) in [
        (None, None, None),
        (Some("same"), Some("same"), Some("same")),
        (Some("hub"), None, Some("hub")),
    ] {
        let (sources, id) = (both(hub, team), object);
        let old = tracked_by(id);
        for pointer in [REPLICAS, IMAGE] {
            let d = judged(&changed(&old, pointer, json!("x")), &sources);
            assert_eq!(d.verdict, Verdict::Deny, "{id:?} {pointer}");
            assert!(
                said(&d).contains("two watched installations share"),
                "{}",
                said(&d)
            );
        }
    }
}

/// The hub's argocd-cm not read yet (the hub out of reach since start): its
/// installation has no id, so it may track every object, this cluster's own
/// too. Neither's rules apply, and the note does not blame a shared id.
#[test]
fn an_installation_not_read_yet_may_track_every_object() {
    let mut sources = both(None, Some("team"));
    sources.argocd[0].applications = Default::default();
    sources.unread = vec!["argocd-cm", "Application"];
    let old = tracked_by(Some("team"));
    let d = judged(&changed(&old, IMAGE, json!("web:2")), &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{}", said(&d));
    assert!(
        said(&d).contains("an installation not read yet"),
        "{}",
        said(&d)
    );
    assert_eq!(d.sources_unread, ["argocd-cm", "Application"]);
}

/// The id that chooses the rules is the stored object's. Moving an object
/// to the looser installation is itself a change of a tracked object.
#[test]
fn re_labelling_an_object_to_another_installation_is_drift() {
    let sources = both(Some("hub"), Some("team"));
    let hubs = tracked_by(Some("hub"));
    let relabelled = with(&hubs, ID, json!("team"));
    let d = judged(&Review::update(hubs.clone(), relabelled.clone()), &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{}", said(&d));
    // Both at once: the team ignores the image, the hub does not.
    let hotfix = with(&relabelled, IMAGE, json!("evil:1"));
    let d = judged(&Review::update(hubs, hotfix), &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{}", said(&d));
}

/// Deleting a namespace that either installation deploys into is refused.
#[test]
fn a_namespace_either_installation_deploys_into_is_guarded() {
    let sources = both(Some("hub"), Some("team"));
    for namespace in ["production", "team-prod"] {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        let d = judged(&Review::delete(ns), &sources);
        assert_eq!(d.verdict, Verdict::Deny, "{namespace}: {}", said(&d));
    }
}

/// The team syncs `myapp` as `deployer`: trusted for the team's objects, not
/// for the hub's `myapp`, whose Argo CD does not impersonate.
#[test]
fn a_sync_account_is_trusted_only_for_its_own_installation() {
    let sources = both(Some("hub"), Some("team"));
    let write = |id| changed(&tracked_by(Some(id)), REPLICAS, json!(5)).by(DEPLOYER, &[]);
    let teams = judged(&write("team"), &sources);
    assert_eq!(
        (teams.verdict, teams.finding),
        (Verdict::Allow, Finding::Controller)
    );
    let hubs = judged(&write("hub").by(DEPLOYER, &[]), &sources);
    assert_ne!(hubs.finding, Finding::Controller, "{}", said(&hubs));
    let image = changed(&tracked_by(Some("hub")), IMAGE, json!("x")).by(DEPLOYER, &[]);
    assert_eq!(judged(&image, &sources).verdict, Verdict::Deny);
}

/// What a person may not do to a tracked object by hand, they may not do
/// by naming the installation that ignores more: create it or delete it.
#[test]
fn naming_an_installation_does_not_open_a_create_or_a_delete() {
    let sources = both(Some("hub"), Some("team"));
    for id in ["hub", "team"] {
        let object = tracked_by(Some(id));
        let created = judged(&Review::create(object.clone()), &sources);
        assert_eq!(created.verdict, Verdict::Deny, "{id}: {}", said(&created));
        let deleted = judged(&Review::delete(object), &sources);
        assert_eq!(deleted.verdict, Verdict::Deny, "{id}: {}", said(&deleted));
    }
}
