//! Every message that quotes user input quotes at most
//! [`QUOTE_BYTES`](crate::text::QUOTE_BYTES) of it (issue 50, item 6):
//! generated reviews carry one huge input in any of the places a client or
//! a tenant writes (annotations, labels, keys, names, the review's own
//! fields), and every text driftguard makes of them (the denial, each
//! warning, the audit annotations, the audit line, every log line, the
//! error of a review it cannot read) holds no run of it longer than that.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::audit::AuditRecord;
use crate::drift::breakglass_state::{EXPIRES, LABEL, PAUSED, REASON};
use crate::response::Endpoint;
use crate::text::QUOTE_BYTES;

/// Where the huge input goes.
#[derive(Clone, Copy, Debug)]
enum At {
    Expires,
    Reason,
    Paused,
    TrackingId,
    FluxName,
    DataKey,
    Username,
    Name,
    Uid,
    ReviewApiVersion,
    Operation,
}

const EVERY: [At; 11] = [
    At::Expires,
    At::Reason,
    At::Paused,
    At::TrackingId,
    At::FluxName,
    At::DataKey,
    At::Username,
    At::Name,
    At::Uid,
    At::ReviewApiVersion,
    At::Operation,
];

/// The marker the huge input is made of: its longest run in any output is
/// how much of it was quoted.
const MARK: char = 'Z';

/// A review of sam's update of a Flux-managed ConfigMap, armed or not,
/// with `huge` at `at`.
fn review(at: At, huge: &str, armed: bool) -> Value {
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(10)).to_string();
    let mut old = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "prod",
            "labels": {"kustomize.toolkit.fluxcd.io/name": "apps",
                "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
        "data": {"a": "1"}});
    let mut new = old.clone();
    new["data"]["a"] = json!("2");
    if armed {
        new["metadata"]["annotations"] = json!({REASON: "INC-7", EXPIRES: expires});
        new["metadata"]["labels"][LABEL] = json!("true");
    }
    let mut review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "web", "namespace": "prod", "operation": "UPDATE",
            "userInfo": {"username": "sam", "groups": ["system:authenticated"]},
            "object": null, "oldObject": null}});
    let annotate = |o: &mut Value, k: &str, v: &str| {
        o["metadata"]["annotations"][k] = json!(v);
    };
    match at {
        At::Expires => {
            annotate(&mut new, REASON, "INC-7");
            annotate(&mut new, EXPIRES, huge);
        }
        At::Reason => {
            annotate(&mut new, REASON, huge);
            annotate(&mut new, EXPIRES, &expires);
        }
        At::Paused => annotate(&mut new, PAUSED, huge),
        At::TrackingId => {
            let id = format!("{huge}:/ConfigMap:prod/web");
            for o in [&mut old, &mut new] {
                o["metadata"]["labels"] = json!({});
                annotate(o, "argocd.argoproj.io/tracking-id", &id);
            }
        }
        At::FluxName => {
            for o in [&mut old, &mut new] {
                o["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!(huge);
            }
        }
        At::DataKey => new["data"][huge] = json!("x"),
        At::Username => review["request"]["userInfo"]["username"] = json!(huge),
        At::Name => review["request"]["name"] = json!(huge),
        At::Uid => review["request"]["uid"] = json!(huge),
        At::ReviewApiVersion => review["apiVersion"] = json!(huge),
        At::Operation => review["request"]["operation"] = json!(huge),
    }
    review["request"]["object"] = new;
    review["request"]["oldObject"] = old;
    review
}

/// Every text driftguard makes of `body` at `endpoint`: the reply's message,
/// warnings and audit annotations, the audit line and every log line, or
/// the error it answers an unreadable review with.
fn texts(body: &[u8], endpoint: Endpoint) -> Vec<String> {
    let policy = crate::Policy::from_yaml(
        "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
        "bounded.yaml",
    )
    .expect("a policy");
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let mut out = tracing::subscriber::with_default(subscriber, || {
        let req = match crate::request::parse(body) {
            Ok(req) => req,
            Err(e) => return vec![e.to_string()],
        };
        let view = crate::request::view(&req);
        let none = crate::deadline::Deadline::none();
        let now = jiff::Timestamp::now();
        let judged = match crate::judge_request(&policy, &req, endpoint, None, None, now, &none) {
            Ok(judged) => judged,
            Err(e) => return vec![e.to_string()],
        };
        AuditRecord::decided(endpoint.as_str(), "u-1", "v1", &view, &judged.decision, 1).emit();
        let mut out = Vec::new();
        if let Some(r) = &judged.response.response {
            out.push(r.result.message.clone());
            out.extend(r.warnings.iter().flatten().cloned());
            out.extend(r.audit_annotations.values().cloned());
        }
        out
    });
    out.extend(logs.0.lock().unwrap().lines().map(str::to_owned));
    out
}

/// What the test subscriber wrote.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<String>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The longest run of [`MARK`] in `text`.
fn longest_run(text: &str) -> usize {
    text.split(|c| c != MARK).map(str::len).max().unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// One huge input, anywhere, armed or not, at either webhook: no text
    /// quotes more than QUOTE_BYTES of it.
    #[test]
    fn every_message_quotes_at_most_a_few_hundred_bytes_of_an_input(
        at in proptest::sample::select(EVERY.to_vec()),
        len in 1_000usize..200_000,
        lead in "[a-zé\u{202e}\n]{0,3}",
        armed in any::<bool>(),
        validate in any::<bool>(),
    ) {
        let huge = format!("{lead}{}", MARK.to_string().repeat(len));
        let body = serde_json::to_vec(&review(at, &huge, armed)).unwrap();
        let endpoint = if validate { Endpoint::Validate } else { Endpoint::Mutate };
        for text in texts(&body, endpoint) {
            let run = longest_run(&text);
            prop_assert!(
                run <= QUOTE_BYTES,
                "{at:?}: {run} bytes of the input quoted in: {}",
                crate::text::ellipsize(&text, 400)
            );
        }
    }
}

/// The case: refusing a 200 KB expiry quotes a few hundred bytes
/// of it, says how many more there were, and still says why.
#[test]
fn a_200_kb_expiry_is_refused_in_a_short_message() {
    let huge = MARK.to_string().repeat(200_000);
    let body = serde_json::to_vec(&review(At::Expires, &huge, false)).unwrap();
    let texts = texts(&body, Endpoint::Validate);
    let denial = &texts[0];
    assert!(denial.len() < 2_000, "{} bytes", denial.len());
    assert!(denial.contains("is not an RFC 3339 time"), "{denial}");
    assert!(
        denial.contains(&format!("({} more bytes)", 200_000 - QUOTE_BYTES)),
        "{denial}"
    );
}
