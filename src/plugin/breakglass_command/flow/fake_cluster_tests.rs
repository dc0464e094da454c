//! The command's flow on a fake apiserver ([`super::super::fake`]): what is
//! asked, paused, written and lifted, in which order, and where.

use std::process::ExitCode;

use jiff::SignedDuration;

use super::*;
use crate::plugin::api::ArgoCdArgs;
use crate::plugin::breakglass_command::fake;
use crate::plugin::breakglass_command::render::exit_code;

/// What the hub calls this cluster in the fake-cluster tests.
const SPOKE: &str = "https://spoke-1.example:6443";

/// Arms ConfigMap p/x on a [`fake`] cluster: the result, the requests
/// made in order, and their bodies.
async fn arm_on(cluster: fake::Cluster, require_pause: bool) -> (Written, Vec<String>, Vec<Value>) {
    run_on(cluster, require_pause, true).await
}

/// Ends the break-glass on ConfigMap p/x on a [`fake`] cluster, as
/// [`arm_on`] arms it.
async fn end_on(cluster: fake::Cluster) -> (Written, Vec<String>, Vec<Value>) {
    run_on(cluster, false, false).await
}

/// The type of every object the fake-cluster tests arm.
fn config_maps() -> Resource {
    Resource {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        namespaced: true,
    }
}

async fn run_on(
    cluster: fake::Cluster,
    require_pause: bool,
    arm: bool,
) -> (Written, Vec<String>, Vec<Value>) {
    let log = fake::Log::default();
    let api = fake::api(cluster, log.clone());
    let resource = config_maps();
    let policy = crate::policy::Policy::embedded();
    let target = Target {
        api: &api,
        apps: &api,
        hub: None,
        resource: &resource,
        name: "x",
        shown: "configmap/x",
        policy: &policy,
        argocd_namespace: "argocd",
        cluster_names: &[],
        require_pause,
        no_pause: None,
        told: Default::default(),
    };
    let written = if arm {
        let at = Timestamp::now() + SignedDuration::from_mins(30);
        target.arm("INC-1", at).await.unwrap()
    } else {
        target.end().await.unwrap()
    };
    // Discovery (whether Applications are served here) is not the object's story.
    let log = log.lock().unwrap().clone().into_iter();
    let log = log.filter(|(r, _)| r != "GET /api" && r != "GET /apis");
    let (requests, bodies) = log.unzip();
    (written, requests, bodies)
}

fn dry_run() -> String {
    format!("PATCH {}?dryRun=All", fake::OBJECT)
}

#[tokio::test]
async fn a_refusal_by_the_server_writes_nothing_and_pauses_nothing() {
    let cluster = fake::Cluster {
        deny: true,
        application: true,
        armed: false,
        ..Default::default()
    };
    let (written, requests, _) = arm_on(cluster, false).await;
    let Written::Denied(refusal) = written else {
        panic!("not denied: {requests:?}");
    };
    assert!(
        refusal.message.starts_with(
            "admission webhook \"validate.driftguard.io\" denied the request: driftguard: bob"
        ),
        "{}",
        refusal.message
    );
    assert_eq!(
        requests,
        [
            format!("GET {}", fake::OBJECT),
            format!("GET {}", fake::APP),
            dry_run()
        ]
    );
}

#[tokio::test]
async fn the_dry_run_comes_first_then_the_pause_then_the_same_write() {
    let cluster = fake::Cluster {
        deny: false,
        application: true,
        armed: false,
        ..Default::default()
    };
    let (written, requests, bodies) = arm_on(cluster, false).await;
    let Written::Done(_, report) = written else {
        panic!("not armed: {requests:?}");
    };
    assert_eq!(report.state, "paused");
    assert_eq!(
        requests,
        [
            format!("GET {}", fake::OBJECT),
            format!("GET {}", fake::APP),
            dry_run(),
            format!("GET {}", fake::APP),
            format!("PATCH {}", fake::APP),
            format!("PATCH {}", fake::OBJECT),
            // Read again once armed: still paused, nothing written.
            format!("GET {}", fake::APP),
        ]
    );
    // The write asked about is the write made.
    assert_eq!(bodies[2], bodies[5]);
    assert_eq!(
        bodies[5]["metadata"]["annotations"][crate::drift::breakglass_state::PAUSED],
        crate::breakglass::application::SKIP_RECONCILE
    );
}

/// A sweeper that lifted the pause while the arming was on its way (it saw
/// the pause held by no armed object) loses: the plugin reads the
/// Application again once the arming landed, and pauses it again.
#[tokio::test]
async fn a_pause_lifted_while_the_arming_was_on_its_way_is_paused_again() {
    let cluster = fake::Cluster {
        application: true,
        lifted_while_arming: true,
        ..Default::default()
    };
    let (written, requests, bodies) = arm_on(cluster, false).await;
    let Written::Done(_, report) = written else {
        panic!("not armed: {requests:?}");
    };
    assert_eq!(report.state, "paused");
    let last: Vec<&String> = requests.iter().rev().take(3).collect();
    assert_eq!(
        last,
        [
            &format!("PATCH {}", fake::APP),
            &format!("GET {}", fake::APP),
            &format!("PATCH {}", fake::OBJECT),
        ],
        "{requests:?}"
    );
    let pause = &bodies.last().unwrap()["metadata"]["annotations"];
    assert_eq!(
        pause[crate::breakglass::application::PAUSED_FOR],
        "/ConfigMap:p/x"
    );
}

#[tokio::test]
async fn ending_asks_first_then_sends_the_same_write_then_resumes_the_application() {
    let cluster = fake::Cluster {
        deny: false,
        application: true,
        armed: true,
        ..Default::default()
    };
    let (written, requests, bodies) = end_on(cluster).await;
    let Written::Done(_, report) = written else {
        panic!("not ended: {requests:?}");
    };
    assert_eq!(report.state, "resumed");
    assert_eq!(report.target.as_deref(), Some("Application argocd/myapp"));
    let requests: Vec<&str> = requests.iter().map(|r| r.trim_end_matches('?')).collect();
    assert_eq!(
        requests,
        [
            format!("GET {}", fake::OBJECT),
            dry_run(),
            format!("PATCH {}", fake::OBJECT),
            format!("GET {}", fake::APP),
            format!("PATCH {}", fake::APP),
        ]
    );
    // The write asked about is the write made.
    assert_eq!(bodies[1], bodies[2]);
    assert_eq!(report.lift_by_hand, None);
}

/// The object is ended first; a lift refused after leaves the
/// Application paused: said, with the command that lifts it by hand,
/// and an exit status of 2.
#[tokio::test]
async fn a_lift_refused_after_the_ending_says_how_to_lift_it_by_hand() {
    let cluster = fake::Cluster {
        application: true,
        armed: true,
        app_read_only: true,
        ..Default::default()
    };
    let (written, requests, _) = end_on(cluster).await;
    let Written::Done(_, report) = written else {
        panic!("not ended: {requests:?}");
    };
    assert_eq!(
        requests,
        [
            format!("GET {}", fake::OBJECT),
            dry_run(),
            format!("PATCH {}", fake::OBJECT),
            format!("GET {}", fake::APP),
            format!("PATCH {}", fake::APP),
            // Read again for the command by hand.
            format!("GET {}", fake::APP),
        ]
    );
    assert_eq!(report.state, "lift-failed");
    let cmd = "kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile- driftguard.io/break-glass-paused-for-";
    assert_eq!(report.lift_by_hand.as_deref(), Some(cmd));
    assert!(report.text.contains("cannot patch"), "{}", report.text);
    let warning = report.warning.as_deref().unwrap_or_default();
    for said in [
        "the break-glass on configmap/x is ended",
        cmd,
        "expiry sweeper, if it runs for this cluster, also lifts it",
    ] {
        assert!(warning.contains(said), "{said:?} not in {warning}");
    }
    assert_eq!(exit_code(&report), ExitCode::from(2));
}

#[tokio::test]
async fn an_ending_the_server_refuses_resumes_nothing() {
    let cluster = fake::Cluster {
        deny: true,
        application: true,
        armed: true,
        ..Default::default()
    };
    let (written, requests, _) = end_on(cluster).await;
    assert!(matches!(written, Written::Denied(_)), "{requests:?}");
    assert_eq!(requests, [format!("GET {}", fake::OBJECT), dry_run()]);
}

#[tokio::test]
async fn an_application_that_cannot_be_read_is_armed_unpaused_with_a_warning() {
    let cluster = fake::Cluster {
        deny: false,
        application: false,
        armed: false,
        ..Default::default()
    };
    let (written, requests, bodies) = arm_on(cluster, false).await;
    let Written::Done(_, report) = written else {
        panic!("not armed: {requests:?}");
    };
    assert_eq!(
        requests,
        [
            format!("GET {}", fake::OBJECT),
            format!("GET {}", fake::APP),
            dry_run(),
            format!("PATCH {}", fake::OBJECT),
        ]
    );
    assert_eq!(bodies[2], bodies[3]);
    let annotations = &bodies[3]["metadata"]["annotations"];
    assert_eq!(annotations[crate::drift::breakglass_state::REASON], "INC-1");
    assert!(
        annotations
            .get(crate::drift::breakglass_state::PAUSED)
            .is_none(),
        "{annotations}"
    );
    assert_eq!(report.state, "not-paused");
    assert!(
        report
            .warning
            .as_deref()
            .is_some_and(|w| w.contains("self-heal may revert the hotfix")),
        "{:?}",
        report.warning
    );
    assert_eq!(
        report.pause_by_hand.as_deref(),
        Some(
            "kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile=true"
        )
    );

    // --require-pause: the server is asked, then nothing is written.
    let (written, requests, _) = arm_on(cluster, true).await;
    let Written::Unpausable(why) = written else {
        panic!("not refused: {requests:?}");
    };
    assert!(why.contains("Argo CD is NOT paused"), "{why}");
    assert_eq!(requests.last(), Some(&dry_run()));
    assert!(
        !requests.contains(&format!("PATCH {}", fake::OBJECT)),
        "{requests:?}"
    );
}

/// In a spoke (`--argocd-kubeconfig`): the object is read, asked about
/// and written in the spoke; the Application is read, paused and resumed
/// in the hub.
#[tokio::test]
async fn in_a_spoke_the_hubs_application_is_paused_and_resumed_there() {
    let resource = config_maps();
    let policy = crate::policy::Policy::embedded();
    for arm in [true, false] {
        let (spoke_log, hub_log) = (fake::Log::default(), fake::Log::default());
        let cluster = |application| fake::Cluster {
            deny: false,
            application,
            armed: !arm,
            destination: Some(SPOKE),
            ..Default::default()
        };
        let spoke = fake::api(cluster(false), spoke_log.clone());
        let hub = fake::api(cluster(true), hub_log.clone());
        let target = Target {
            api: &spoke,
            apps: &hub,
            hub: Some("--kubeconfig hub.yaml".into()),
            resource: &resource,
            name: "x",
            shown: "configmap/x",
            policy: &policy,
            argocd_namespace: "argocd",
            cluster_names: &[SPOKE.to_owned()],
            require_pause: true,
            no_pause: None,
            told: Default::default(),
        };
        let written = if arm {
            let at = Timestamp::now() + SignedDuration::from_mins(30);
            target.arm("INC-1", at).await.unwrap()
        } else {
            target.end().await.unwrap()
        };
        let requests = |log: &fake::Log| -> Vec<String> {
            log.lock().unwrap().iter().map(|(r, _)| r.clone()).collect()
        };
        let Written::Done(_, report) = written else {
            panic!(
                "not done: {:?} {:?}",
                requests(&spoke_log),
                requests(&hub_log)
            );
        };
        assert_eq!(report.state, if arm { "paused" } else { "resumed" });
        let (spoke, hub) = (requests(&spoke_log), requests(&hub_log));
        assert!(spoke.iter().all(|r| !r.contains(fake::APP)), "{spoke:?}");
        assert_eq!(
            spoke.last().map(String::as_str),
            Some(format!("PATCH {}", fake::OBJECT).as_str())
        );
        assert_eq!(
            hub.iter()
                .filter(|r| *r == &format!("PATCH {}", fake::APP))
                .count(),
            1,
            "{hub:?}"
        );
        assert!(hub.iter().all(|r| r.contains(fake::APP)), "{hub:?}");
    }
}

/// Issue 35: an Application that deploys to another cluster is never
/// paused for an object here, though the object's tracking id names it
/// (a hub's, or this cluster's own): the object is armed unpaused with
/// why, and `--require-pause` refuses; `--end` lifts no pause there. In
/// a hub without --cluster-name, what the hub calls this cluster is what
/// driftguard's answer to the dry run tells (issue 50, item 5), the flag
/// winning over it; told nothing, where it deploys cannot be told: not
/// paused, and `--end` refuses to guess.
#[tokio::test]
async fn an_application_that_deploys_to_another_cluster_is_never_paused() {
    const OTHER: &str = "https://spoke-2.example:6443";
    let resource = config_maps();
    let policy = crate::policy::Policy::embedded();
    let spoke = [SPOKE.to_owned()];
    // (in the hub, --cluster-name, what driftguard tells, where the
    // Application deploys): what the report says when it is not paused.
    type Case<'a> = (
        bool,
        &'a [String],
        Option<&'static str>,
        &'static str,
        Option<&'static str>,
    );
    let cases: [Case; 9] = [
        (true, &spoke, None, SPOKE, None),
        (
            true,
            &spoke,
            None,
            OTHER,
            Some("deploys to another cluster"),
        ),
        (true, &[], None, SPOKE, Some("give --cluster-name")),
        (true, &[], Some(SPOKE), SPOKE, None),
        (
            true,
            &[],
            Some(SPOKE),
            OTHER,
            Some("deploys to another cluster"),
        ),
        (true, &spoke, Some(OTHER), SPOKE, None),
        (
            true,
            &spoke,
            Some(OTHER),
            OTHER,
            Some("deploys to another cluster"),
        ),
        (false, &[], None, IN_CLUSTER_SERVER, None),
        (
            false,
            &spoke,
            None,
            OTHER,
            Some("deploys to another cluster"),
        ),
    ];
    let requests = |log: &fake::Log, request: &str| -> Vec<Value> {
        let log = log.lock().unwrap();
        let matching = log.iter().filter(|(r, _)| r == request);
        matching.map(|(_, body)| body.clone()).collect()
    };
    let (write, pause) = (
        format!("PATCH {}", fake::OBJECT),
        format!("PATCH {}", fake::APP),
    );
    for (arm, require_pause) in [(true, false), (true, true), (false, false)] {
        for (hub, names, told, destination, unpaused) in cases {
            let case = format!("hub {hub}, {names:?}, told {told:?}, to {destination}, arm {arm}");
            let (here_log, hub_log) = (fake::Log::default(), fake::Log::default());
            let cluster = fake::Cluster {
                application: true,
                armed: !arm,
                destination: Some(destination),
                told,
                ..Default::default()
            };
            let (here, there) = (
                fake::api(cluster, here_log.clone()),
                fake::api(cluster, hub_log.clone()),
            );
            let target = Target {
                api: &here,
                apps: if hub { &there } else { &here },
                hub: hub.then(|| "--kubeconfig hub.yaml".to_owned()),
                resource: &resource,
                name: "x",
                shown: "configmap/x",
                policy: &policy,
                argocd_namespace: "argocd",
                cluster_names: names,
                require_pause,
                no_pause: None,
                told: Default::default(),
            };
            let apps_log = if hub { &hub_log } else { &here_log };
            if !arm {
                let ended = target.end().await;
                let (paused, writes) = (requests(apps_log, &pause), requests(&here_log, &write));
                ended_for_another_cluster(ended, unpaused, &paused, &writes, &case);
                continue;
            }
            let at = Timestamp::now() + SignedDuration::from_mins(30);
            let written = target.arm("INC-1", at).await.unwrap();
            let (paused, writes) = (requests(apps_log, &pause), requests(&here_log, &write));
            armed_for_another_cluster(written, require_pause, unpaused, &paused, &writes, &case);
        }
    }
}

/// What [`an_application_that_deploys_to_another_cluster_is_never_paused`]
/// checks of an ending: `paused`, the Application's patches; `writes`, the
/// object's.
fn ended_for_another_cluster(
    ended: Result<Written, PluginError>,
    unpaused: Option<&str>,
    paused: &[Value],
    writes: &[Value],
    case: &str,
) {
    match (unpaused, ended) {
        (None, Ok(Written::Done(_, r))) => {
            assert_eq!((r.state, paused.len()), ("resumed", 1), "{case}")
        }
        (Some("give --cluster-name"), Err(PluginError::Usage(why))) => {
            assert!(why.contains("give --cluster-name"), "{case}: {why}");
            assert_eq!(writes, [] as [Value; 0], "{case}");
        }
        (Some(_), Ok(Written::Done(_, r))) => {
            assert_eq!((r.state, paused.len()), ("not-paused", 0), "{case}");
            assert_eq!(writes.len(), 1, "{case}");
        }
        (_, _) => panic!("{case}: ended otherwise"),
    }
}

/// What [`an_application_that_deploys_to_another_cluster_is_never_paused`]
/// checks of an arming, as [`ended_for_another_cluster`] of an ending.
fn armed_for_another_cluster(
    written: Written,
    require_pause: bool,
    unpaused: Option<&str>,
    paused: &[Value],
    writes: &[Value],
    case: &str,
) {
    let Some(why) = unpaused else {
        assert!(matches!(written, Written::Done(..)), "{case}");
        assert_eq!(paused.len(), 1, "{case}");
        return;
    };
    assert_eq!(paused, [] as [Value; 0], "{case}: paused");
    match written {
        Written::Unpausable(text) if require_pause => {
            assert!(text.contains(why), "{case}: {text}");
            assert_eq!(writes, [] as [Value; 0], "{case}");
        }
        Written::Done(_, r) if !require_pause => {
            assert_eq!((r.state, r.tool), ("not-paused", Some("Argo CD")), "{case}");
            // No command to pause it by hand: that is the harm.
            assert_eq!(r.pause_by_hand, None, "{case}");
            let warning = r.warning.unwrap_or_default();
            for said in ["self-heal may revert the hotfix", why] {
                assert!(warning.contains(said), "{case}: {said:?} not in {warning}");
            }
            let annotations = &writes[0]["metadata"]["annotations"];
            assert_eq!(annotations[crate::drift::breakglass_state::REASON], "INC-1");
            assert!(
                annotations
                    .get(crate::drift::breakglass_state::PAUSED)
                    .is_none(),
                "{case}: {annotations}"
            );
        }
        _ => panic!("{case}: armed otherwise"),
    }
}

/// What [`with_two_argo_cds_the_application_of_the_objects_installation_is_paused`]
/// checks once `report` is in: the one Application patched, `want` (here,
/// hub, nowhere), as `logs` (this cluster's, the hub's) recorded it.
fn paused_where(
    arm: bool,
    want: &str,
    report: &PauseReport,
    logs: (&fake::Log, &fake::Log),
    case: &str,
) {
    let (spoke_log, hub_log) = logs;
    let patched = |log: &fake::Log| -> Vec<String> {
        let log = log.lock().unwrap();
        let apps = log.iter().map(|(r, _)| r.clone());
        apps.filter(|r| r.starts_with("PATCH /apis/argoproj.io/"))
            .collect()
    };
    let (here, there) = (patched(spoke_log), patched(hub_log));
    let got = match (here.len(), there.len()) {
        (1, 0) if here[0].contains("/namespaces/gitops/") => "here",
        (0, 1) if there[0].contains("/namespaces/argocd/") => "hub",
        (0, 0) => "nowhere",
        _ => "wrong",
    };
    // Ending lifts only a pause that lists the object: with the hub
    // ruled out, this cluster's is the one to look in.
    let want = if arm || want != "nowhere" {
        want
    } else {
        "here"
    };
    assert_eq!(got, want, "{case}: {here:?} {there:?}");
    let state = match (want, arm) {
        ("nowhere", _) => "not-paused",
        (_, true) => "paused",
        (_, false) => "resumed",
    };
    assert_eq!(report.state, state, "{case}: {}", report.text);
    if want == "nowhere" && arm {
        // The by-hand command is for this cluster, with why.
        let cmd = "kubectl annotate applications.argoproj.io -n gitops myapp argocd.argoproj.io/skip-reconcile=true";
        assert_eq!(report.pause_by_hand.as_deref(), Some(cmd), "{case}");
        assert!(
            report.text.contains("neither has its id"),
            "{}",
            report.text
        );
    }
}

/// With a hub's Argo CD and this cluster's own (in `gitops`), each with
/// an Application `myapp`: the one of the installation whose id the
/// object carries is paused and resumed, in its cluster. Ids that cannot
/// tell fall back to the hub, said; ids that rule the hub out pause nothing.
#[tokio::test]
async fn with_two_argo_cds_the_application_of_the_objects_installation_is_paused() {
    let resource = config_maps();
    let policy = crate::policy::Policy::embedded();
    let args = ArgoCdArgs {
        argocd_kubeconfig: Some("hub.yaml".into()),
        argocd_context: None,
        local_argocd_namespace: Some("gitops".into()),
    };
    let (hub_id, spoke_id) = (Some(Some("hub")), Some(Some("spoke")));
    let spoke_names = [SPOKE.to_owned()];
    type Case = (
        Option<&'static str>,
        Option<Option<&'static str>>,
        Option<Option<&'static str>>,
    );
    // (the object's id, the hub's argocd-cm, this cluster's; None:
    // forbidden): where the Application is paused, and whether the
    // user is told the ids could not tell.
    let cases: [(Case, &str, bool); 6] = [
        ((Some("spoke"), hub_id, spoke_id), "here", false),
        ((Some("hub"), hub_id, spoke_id), "hub", false),
        ((None, hub_id, Some(None)), "here", false),
        ((Some("spoke"), None, spoke_id), "here", false),
        ((Some("spoke"), None, None), "hub", true),
        ((Some("other"), hub_id, spoke_id), "nowhere", true),
    ];
    for (arm, ((object_id, hub_cm, spoke_cm), want, unsure)) in [true, false]
        .into_iter()
        .flat_map(|arm| cases.map(|c| (arm, c)))
    {
        let case = format!("{object_id:?} {hub_cm:?} {spoke_cm:?}, arm {arm}");
        let (spoke_log, hub_log) = (fake::Log::default(), fake::Log::default());
        let cluster = |argocd_cm| fake::Cluster {
            application: true,
            armed: !arm,
            object_id,
            argocd_cm,
            ..Default::default()
        };
        let spoke = fake::api(cluster(spoke_cm), spoke_log.clone());
        let hub = fake::api(cluster(hub_cm), hub_log.clone());
        let object = (&resource, "x", &policy);
        let chosen = installation::choose_for(&spoke, Some(&hub), &args, "argocd", object)
            .await
            .unwrap();
        assert_eq!(
            chosen.unsure.is_some(),
            unsure,
            "{case}: {:?}",
            chosen.unsure
        );
        let target = Target {
            api: &spoke,
            apps: &spoke,
            hub: None,
            resource: &resource,
            name: "x",
            shown: "configmap/x",
            policy: &policy,
            argocd_namespace: "argocd",
            cluster_names: &spoke_names,
            require_pause: false,
            no_pause: None,
            told: Default::default(),
        }
        .at(chosen);
        let written = if arm {
            let at = Timestamp::now() + SignedDuration::from_mins(30);
            target.arm("INC-1", at).await.unwrap()
        } else {
            target.end().await.unwrap()
        };
        let Written::Done(_, report) = written else {
            panic!("{case}: not done");
        };
        paused_where(arm, want, &report, (&spoke_log, &hub_log), &case);
    }
    // An argocd-cm that sets no id: the policy's installationID stands
    // for it, as in the decision.
    let yaml = "gitops:\n  argocd: {installationID: spoke}\n";
    let with_id = crate::policy::Policy::from_yaml(yaml, "p.yaml").unwrap();
    let cluster = |object_id, argocd_cm| fake::Cluster {
        application: true,
        object_id,
        argocd_cm,
        ..Default::default()
    };
    let spoke = fake::api(cluster(Some("spoke"), Some(None)), fake::Log::default());
    let hub = fake::api(cluster(None, Some(Some("hub"))), fake::Log::default());
    let object = (&resource, "x", &with_id);
    let chosen = installation::choose_for(&spoke, Some(&hub), &args, "argocd", object)
        .await
        .unwrap();
    assert_eq!(
        (chosen.namespace, chosen.hub, chosen.unsure),
        ("gitops", None, None)
    );
    // Without a hub, the flag has nothing to choose between.
    let spoke = fake::api(fake::Cluster::default(), fake::Log::default());
    let chosen = installation::choose(&spoke, None, &args, "argocd", None, &policy).await;
    assert!(matches!(chosen, Err(PluginError::Usage(_))));
}
