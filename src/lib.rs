//! driftguard: a Kubernetes admission webhook that stops manual drift on
//! GitOps-managed objects before it happens.
//!
//! Data flow: bytes → [`request::parse`] → `drift::decide` (pure) →
//! `response::respond` → AdmissionReview JSON. `check` runs [`judge`];
//! the server's [`service::Reviewer`] runs [`judge_request`] and records the
//! outcome; [`server`] only carries bytes over HTTPS.

#![forbid(unsafe_code)]
// Every public item documented: clippy -D warnings keeps it so.
#![warn(missing_docs)]
// No function over 100 lines (clippy.toml): CI fails when one grows.
#![warn(clippy::too_many_lines)]

pub mod args;
pub(crate) mod audit;
pub(crate) mod breakglass;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod deadline;
pub mod decider;
pub mod drift;
pub mod logging;
pub mod metrics;
pub mod plugin;
pub mod policy;
pub mod registration;
pub mod request;
pub mod response;
pub mod server;
pub mod service;
pub mod sources;
pub(crate) mod text;

use jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::Value;

pub use drift::Decision;
pub use policy::Policy;
pub use request::ReviewError;
pub use response::Endpoint;

/// The result of judging one review: the reply and the decision behind it.
pub struct Judged {
    /// The AdmissionReview to send back.
    pub response: AdmissionReview<DynamicObject>,
    /// What was decided, and why.
    pub decision: Decision,
}

impl Judged {
    /// The reply as sent on the wire: every map sorted, so the same review
    /// always yields the same bytes.
    pub fn to_json(&self) -> Vec<u8> {
        response::to_bytes(&self.response)
    }
}

/// The one code path shared by `check` and the server: body in, response
/// out. Without a deadline ([`deadline::Deadline::none`]): for tests,
/// benchmarks and fuzzing; the server and `check` run [`judge_request`]
/// under the decider's.
pub fn judge(
    policy: &Policy,
    body: &[u8],
    endpoint: Endpoint,
    parent: Option<&Value>,
    now: Timestamp,
) -> Result<Judged, ReviewError> {
    let req = request::parse(body)?;
    let none = deadline::Deadline::none();
    judge_request(policy, &req, endpoint, parent, None, now, &none).map_err(ReviewError::from)
}

/// [`judge`] for a request already parsed, stopped at `deadline`
/// ([`drift::DecideError::Stopped`]).
pub fn judge_request(
    policy: &Policy,
    req: &AdmissionRequest<request::RawObject>,
    endpoint: Endpoint,
    parent: Option<&Value>,
    sources: Option<&sources::Sources>,
    now: Timestamp,
    deadline: &deadline::Deadline,
) -> Result<Judged, drift::DecideError> {
    let view = request::view(req);
    let ctx = drift::Context {
        now,
        parent,
        sources,
        installation: Default::default(),
        deadline,
    };
    let decision = drift::decide(policy, &view, &ctx)?;
    let response = response::respond(req, &view, &decision, endpoint, now).into_review();
    Ok(Judged { response, decision })
}
