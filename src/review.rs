//! Bytes in, a typed `AdmissionRequest` out, or an error that names the problem.
//! The objects stay as `serde_json::Value`: the engine diffs them as JSON, and
//! parsing them once as plain values is the cheapest faithful representation.

use std::borrow::Cow;

use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation as KubeOperation};
use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::drift::{Operation, Request};

pub const API_VERSION: &str = "admission.k8s.io/v1";

/// A Kubernetes object kept as JSON, with its metadata typed for kube's `Resource`.
/// `metadata.managedFields` stays in `value` only: typing it would double the
/// parse cost of every review, and nothing reads it through `ObjectMeta`.
#[derive(Clone, Debug)]
pub struct RawObject {
    pub metadata: ObjectMeta,
    pub value: Value,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(d)?;
        if !value.is_object() {
            return Err(serde::de::Error::custom("object is not a JSON object"));
        }
        let metadata = match value.get_mut("metadata") {
            Some(m) => {
                let managed = m.as_object_mut().and_then(|m| m.remove("managedFields"));
                let meta = ObjectMeta::deserialize(&*m).map_err(serde::de::Error::custom)?;
                if let (Some(map), Some(managed)) = (m.as_object_mut(), managed) {
                    map.insert("managedFields".into(), managed);
                }
                meta
            }
            None => ObjectMeta::default(),
        };
        Ok(Self { metadata, value })
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Why a body is not a review driftguard can judge. Each text names the problem.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON at all.
    #[error("body is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not shaped like an AdmissionReview.
    #[error("body is not an AdmissionReview: {0}")]
    NotAdmissionReview(String),
    /// Only `admission.k8s.io/v1` is served.
    #[error("apiVersion is {0:?}, expected \"admission.k8s.io/v1\"")]
    WrongApiVersion(String),
    #[error("kind is {0:?}, expected \"AdmissionReview\"")]
    WrongKind(String),
    #[error("AdmissionReview has no request")]
    MissingRequest,
    #[error("AdmissionReview request has no uid")]
    MissingUid,
    /// The request lacks an object the operation needs.
    #[error("{0}")]
    Incomplete(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

pub fn parse(body: &[u8]) -> Result<AdmissionRequest<RawObject>, ReviewError> {
    let review: AdmissionReview<RawObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Err(explain(body, e)),
    };
    check_envelope(&review.types.api_version, &review.types.kind)?;
    let request: AdmissionRequest<RawObject> =
        review.try_into().map_err(|_| ReviewError::MissingRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::MissingUid);
    }
    Ok(request)
}

fn check_envelope(api_version: &str, kind: &str) -> Result<(), ReviewError> {
    if api_version != API_VERSION {
        return Err(ReviewError::WrongApiVersion(api_version.to_owned()));
    }
    if kind != "AdmissionReview" {
        return Err(ReviewError::WrongKind(kind.to_owned()));
    }
    Ok(())
}

/// Turns a parse failure into the most useful of our errors. Only runs on the
/// error path, so the happy path parses the body once.
fn explain(body: &[u8], err: serde_json::Error) -> ReviewError {
    use serde_json::error::Category;
    if matches!(
        err.classify(),
        Category::Syntax | Category::Eof | Category::Io
    ) {
        return ReviewError::NotJson(err.to_string());
    }
    let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if is_object
        && let Ok(env) = serde_json::from_slice::<Envelope>(body)
        && !(env.api_version.is_empty() && env.kind.is_empty())
        && let Err(e) = check_envelope(&env.api_version, &env.kind)
    {
        return e;
    }
    let text = err.to_string();
    if text.starts_with("missing field `uid`") {
        return ReviewError::MissingUid;
    }
    ReviewError::NotAdmissionReview(text)
}

/// The engine's view of a parsed request.
pub fn view(req: &AdmissionRequest<RawObject>) -> Request<'_> {
    Request {
        operation: match req.operation {
            KubeOperation::Create => Operation::Create,
            KubeOperation::Update => Operation::Update,
            KubeOperation::Delete => Operation::Delete,
            KubeOperation::Connect => Operation::Connect,
        },
        group: &req.kind.group,
        kind: &req.kind.kind,
        resource_group: &req.resource.group,
        resource: &req.resource.resource,
        sub_resource: req.sub_resource.as_deref().unwrap_or_default(),
        name: &req.name,
        namespace: req.namespace.as_deref().unwrap_or_default(),
        username: req.user_info.username.as_deref().unwrap_or_default(),
        groups: req.user_info.groups.as_deref().unwrap_or_default(),
        object: req.object.as_ref().map(|o| &o.value),
        old_object: req.old_object.as_ref().map(|o| &o.value),
        dry_run: req.dry_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> String {
        parse(body.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn names_each_problem() {
        assert!(err("{not json").starts_with("body is not JSON"));
        assert!(
            err(r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#)
                .contains("v1beta1")
        );
        assert!(
            err(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
                .contains("no request")
        );
        assert!(err(r#"[1,2]"#).starts_with("body is not an AdmissionReview"));
        let no_uid = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
            "operation":"CREATE","userInfo":{},"object":{}}}"#;
        assert_eq!(err(no_uid), "AdmissionReview request has no uid");
    }
}
