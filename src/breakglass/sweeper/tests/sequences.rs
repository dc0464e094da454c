//! Armed is recorded and ended, whatever happened before (issue 50, item
//! 1): generated sequences of armings the webhook saw (recorded) and did not
//! see (an outage, an earlier release), records deleted by hand, restarts
//! (an upgrade is a restart with unrecorded armings), and expiries, against
//! a fake apiserver that keeps the objects and the records. After each
//! sweep (the records' events taken in, a whole scan round, two checks):
//! every armed object not yet expired has a record, and every one whose
//! expiry has passed is ended.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::drift::breakglass_state::{LABEL, PAUSED, REASON};

const OBJECTS: usize = 4;
const PREFIX: &str = "/api/v1/namespaces/prod/configmaps/";
const RECORDS: &str = "/api/v1/namespaces/driftguard/configmaps/";

#[derive(Clone, Debug)]
enum Op {
    /// Armed through the webhook: recorded before it lands.
    ArmSeen(usize),
    /// Armed while the webhook failed open, or by an earlier release.
    ArmUnseen(usize),
    /// Its record deleted by hand.
    DeleteRecord(usize),
    /// The sweeper restarts (a new leader, an upgrade).
    Restart,
    /// Its expiry passes.
    Expire(usize),
    /// The sweeper runs: events in, a scan round, checks.
    Sweep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0..OBJECTS).prop_map(Op::ArmSeen),
        (0..OBJECTS).prop_map(Op::ArmUnseen),
        (0..OBJECTS).prop_map(Op::DeleteRecord),
        Just(Op::Restart),
        (0..OBJECTS).prop_map(Op::Expire),
        Just(Op::Sweep),
    ];
    prop::collection::vec(op, 1..14)
}

/// What the fake apiserver holds.
#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    records: BTreeMap<String, Value>,
    version: u64,
    /// Watch events of the records, for the test to hand to the sweeper.
    events: Vec<kube::runtime::watcher::Event<k8s_openapi::api::core::v1::ConfigMap>>,
}

type Shared = Arc<Mutex<State>>;

fn object(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": "prod",
            "labels": {"kustomize.toolkit.fluxcd.io/name": "apps",
                "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
        "data": {"LOG_LEVEL": "info"}})
}

fn armed(o: &Value, expires: &str) -> Value {
    let mut o = o.clone();
    let meta = &mut o["metadata"];
    meta["labels"][LABEL] = json!("true");
    for (k, v) in [
        (REASON, "INC-50"),
        (EXPIRES, expires),
        (PAUSED, "kustomize.toolkit.fluxcd.io/reconcile"),
        ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
    ] {
        meta["annotations"][k] = json!(v);
    }
    o
}

fn reply(code: u16, body: &Value) -> http::Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(body.to_string().into_bytes()))
        .unwrap()
}

fn status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "code": code, "message": "fake"})
}

/// The fake apiserver's answer to one request.
fn answer(state: &Shared, method: &str, path: &str, query: &str, body: &Value) -> (u16, Value) {
    let mut s = state.lock().unwrap();
    let discovery = |items: Value| json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": items});
    let configmaps = json!({"resource": "configmaps", "scope": "Namespaced",
        "singularResource": "configmap", "responseKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "verbs": ["get", "list", "patch", "watch"]});
    match (method, path) {
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews") => (
            201,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {},
                "status": {"incomplete": false, "nonResourceRules": [],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]}}),
        ),
        ("GET", "/apis") => (200, discovery(json!([]))),
        ("GET", "/api") if query == "aggregated" => (
            200,
            discovery(json!([{"metadata": {"name": ""},
                "versions": [{"version": "v1", "resources": [configmaps]}]}])),
        ),
        ("GET", "/api") => (200, json!({"kind": "APIVersions", "versions": ["v1"]})),
        ("GET", "/api/v1") => (
            200,
            json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "list", "patch"]}]}),
        ),
        ("GET", "/api/v1/configmaps") => {
            let items: Vec<Value> = (s.objects.values())
                .filter(|o| o["metadata"]["labels"].get(LABEL).is_some())
                .map(|o| json!({"metadata": o["metadata"]}))
                .collect();
            (
                200,
                json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {}, "items": items}),
            )
        }
        ("GET", p) if p.starts_with(PREFIX) => match s.objects.get(&p[PREFIX.len()..]) {
            Some(o) => (200, o.clone()),
            None => (404, status(404)),
        },
        ("PATCH", p) if p.starts_with(PREFIX) => {
            s.version += 1;
            let version = s.version.to_string();
            let Some(o) = s.objects.get_mut(&p[PREFIX.len()..]) else {
                return (404, status(404));
            };
            let want = body["metadata"]["resourceVersion"].as_str();
            if want.is_some_and(|rv| Some(rv) != o["metadata"]["resourceVersion"].as_str()) {
                return (409, status(409));
            }
            json_patch::merge(o, body);
            o["metadata"]["resourceVersion"] = json!(version);
            (200, o.clone())
        }
        ("PATCH", p) if p.starts_with(RECORDS) => {
            s.version += 1;
            let mut cm = body.clone();
            cm["metadata"]["resourceVersion"] = json!(s.version.to_string());
            cm["metadata"]["creationTimestamp"] = json!("2020-01-01T00:00:00Z");
            s.records.insert(p[RECORDS.len()..].to_owned(), cm.clone());
            let event = serde_json::from_value(cm.clone()).unwrap();
            s.events.push(kube::runtime::watcher::Event::Apply(event));
            (200, cm)
        }
        ("DELETE", p) if p.starts_with(RECORDS) => {
            let name = &p[RECORDS.len()..];
            let want = body["preconditions"]["resourceVersion"].as_str();
            let held = s
                .records
                .get(name)
                .map(|r| r["metadata"]["resourceVersion"].clone());
            match held {
                None => (404, status(404)),
                Some(rv) if want.is_some_and(|w| Some(w) != rv.as_str()) => (409, status(409)),
                Some(_) => {
                    let cm = s.records.remove(name).unwrap();
                    let event = serde_json::from_value(cm).unwrap();
                    s.events.push(kube::runtime::watcher::Event::Delete(event));
                    (200, status(200))
                }
            }
        }
        _ => (404, status(404)),
    }
}

fn fake(state: Shared) -> kube::Client {
    let service = tower::service_fn(move |request: Request<Body>| {
        let state = state.clone();
        async move {
            let (method, path) = (
                request.method().to_string(),
                request.uri().path().to_owned(),
            );
            let query = request.uri().query().unwrap_or_default().to_owned();
            // The aggregated discovery asks by its Accept header.
            let aggregated = (request.headers().get(http::header::ACCEPT))
                .and_then(|a| a.to_str().ok())
                .is_some_and(|a| a.contains("apidiscovery.k8s.io"));
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let query = if aggregated {
                "aggregated".to_owned()
            } else {
                query
            };
            let (code, out) = answer(&state, &method, &path, &query, &body);
            Ok::<_, std::convert::Infallible>(reply(code, &out))
        }
    });
    kube::Client::new(service, "default")
}

fn policy() -> crate::policy::Policy {
    let text = "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n";
    crate::policy::Policy::from_yaml(text, "sequences").unwrap()
}

fn new_sweeper(client: &kube::Client, state: &Shared) -> Sweeper {
    let policy = PolicyHandle::new(policy());
    let options = options(ToolSources::default(), client);
    let mut sweeper = Sweeper::new(
        client.clone(),
        policy,
        Arc::new(Metrics::default()),
        options,
    );
    // A restart lists the records anew.
    use kube::runtime::watcher::Event;
    sweeper.records.update(Ok(Event::Init));
    let records: Vec<Value> = state.lock().unwrap().records.values().cloned().collect();
    for cm in records {
        let cm = serde_json::from_value(cm).unwrap();
        sweeper.records.update(Ok(Event::InitApply(cm)));
    }
    sweeper.records.update(Ok(Event::InitDone));
    state.lock().unwrap().events.clear();
    sweeper
}

/// Hands the records' watch events to the sweeper.
fn deliver(sweeper: &mut Sweeper, state: &Shared) {
    let events = std::mem::take(&mut state.lock().unwrap().events);
    for event in events {
        sweeper.records.update(Ok(event));
    }
}

/// One sweep: events in, deleted records looked at, a whole scan round,
/// then the checks (a second one for what the first ended).
async fn sweep(sweeper: &mut Sweeper, state: &Shared) {
    deliver(sweeper, state);
    for armed in sweeper.records.take_deleted() {
        sweeper.record_again(armed).await;
    }
    deliver(sweeper, state);
    sweeper.scan.round_now();
    for _ in 0..(2 + OBJECTS) {
        sweeper.scan_step().await;
    }
    deliver(sweeper, state);
    for _ in 0..2 {
        sweeper.check().await;
        deliver(sweeper, state);
    }
}

/// Whether the fake's object `i` is armed, as the sweeper judges it.
fn is_armed(state: &Shared, i: usize) -> Option<Value> {
    let s = state.lock().unwrap();
    let o = s.objects.get(&format!("cm-{i}"))?;
    pause::not_armable(o, "", &policy())
        .is_none()
        .then(|| o.clone())
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let state: Shared = Arc::default();
    {
        let mut s = state.lock().unwrap();
        for i in 0..OBJECTS {
            let mut o = object(i);
            o["metadata"]["resourceVersion"] = json!("1");
            s.objects.insert(format!("cm-{i}"), o);
        }
    }
    let client = fake(state.clone());
    let mut sweeper = new_sweeper(&client, &state);
    let future = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let name = |i: usize| {
        Armed::found(
            ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            "prod".into(),
            format!("cm-{i}"),
        )
        .record_name()
    };
    for op in ops {
        match &op {
            Op::ArmSeen(i) | Op::ArmUnseen(i) => {
                if matches!(op, Op::ArmSeen(_)) {
                    let armed_one = Armed::found(
                        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
                        "prod".into(),
                        format!("cm-{i}"),
                    );
                    sweeper
                        .options
                        .records
                        .record(&armed_one, Duration::from_secs(1))
                        .await
                        .unwrap();
                }
                let mut s = state.lock().unwrap();
                s.version += 1;
                let version = s.version.to_string();
                let o = s.objects.get_mut(&format!("cm-{i}")).unwrap();
                *o = armed(o, &future);
                o["metadata"]["resourceVersion"] = json!(version);
            }
            Op::DeleteRecord(i) => {
                let mut s = state.lock().unwrap();
                if let Some(cm) = s.records.remove(&name(*i)) {
                    let event = serde_json::from_value(cm).unwrap();
                    s.events.push(kube::runtime::watcher::Event::Delete(event));
                }
            }
            Op::Restart => sweeper = new_sweeper(&client, &state),
            // Time passes its expiry: the expiry is read as past, and the
            // sweeper reads it then (at its recorded expiry, or VERIFY).
            Op::Expire(i) => {
                let mut s = state.lock().unwrap();
                let o = s.objects.get_mut(&format!("cm-{i}")).unwrap();
                if o["metadata"]["annotations"].get(EXPIRES).is_some() {
                    o["metadata"]["annotations"][EXPIRES] = json!("2020-01-01T00:00:00Z");
                }
                sweeper.records.unread(&name(*i));
            }
            Op::Sweep => {
                let expired: Vec<usize> = (0..OBJECTS)
                    .filter(|i| {
                        is_armed(&state, *i).is_some_and(|o| {
                            o["metadata"]["annotations"][EXPIRES] == "2020-01-01T00:00:00Z"
                        })
                    })
                    .collect();
                sweep(&mut sweeper, &state).await;
                let records: Vec<String> = state.lock().unwrap().records.keys().cloned().collect();
                for i in 0..OBJECTS {
                    let armed_now = is_armed(&state, i);
                    prop_assert!(
                        !(expired.contains(&i) && armed_now.is_some()),
                        "cm-{i} expired before the sweep and is still armed"
                    );
                    prop_assert!(
                        armed_now.is_none() || records.contains(&name(i)),
                        "cm-{i} is armed without a record after a sweep"
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn armed_is_recorded_and_ended_whatever_happened_before(ops in ops()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(ops))?;
    }
}
