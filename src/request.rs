//! Bytes in, a typed `AdmissionRequest` out, or an error that names the problem.
//! The objects stay as `serde_json::Value`: the engine diffs them as JSON, and
//! parsing them once as plain values is the cheapest faithful representation.

use crate::text::quote;
use std::borrow::Cow;

use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation as KubeOperation};
use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::drift::{Operation, Request};

/// The only AdmissionReview version served.
const API_VERSION: &str = "admission.k8s.io/v1";

/// A Kubernetes object kept as JSON. kube's `Resource` wants an `ObjectMeta`:
/// it holds the object's name, namespace and uid only. Nothing reads
/// metadata through it (the decision reads `value`), and typing all of it
/// (every label and annotation copied, the timestamps parsed) was a tenth of
/// a small review's whole time. Its shape is still checked as the typed
/// parse checked it, for the fields the decision reads.
#[derive(Clone, Debug)]
pub struct RawObject {
    /// Its name, namespace and uid only.
    pub(crate) metadata: ObjectMeta,
    /// The whole object, as sent.
    pub(crate) value: Value,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        if !value.is_object() {
            return Err(serde::de::Error::custom("object is not a JSON object"));
        }
        let metadata = match value.get("metadata") {
            Some(m) => identity(m).map_err(serde::de::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(Self { metadata, value })
    }
}

/// The object's name, namespace and uid, once the metadata the decision
/// reads is shaped as Kubernetes types it: string maps of labels and
/// annotations, string names, a list of owner references.
fn identity(meta: &Value) -> Result<ObjectMeta, String> {
    let Some(map) = meta.as_object() else {
        return Err("metadata is not an object".into());
    };
    let text = |key: &str| match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("metadata.{key} is not a string")),
    };
    for key in ["labels", "annotations"] {
        match map.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(entries)) => {
                if let Some((k, _)) = entries.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!("metadata.{key}.{k} is not a string"));
                }
            }
            Some(_) => return Err(format!("metadata.{key} is not a map of strings")),
        }
    }
    if let Some(owners) = map.get("ownerReferences").filter(|o| !o.is_null()) {
        let entries = owners
            .as_array()
            .ok_or("metadata.ownerReferences is not a list")?;
        if entries.iter().any(|o| !o.is_object()) {
            return Err("metadata.ownerReferences has an entry that is not an object".into());
        }
    }
    for key in ["generateName", "resourceVersion"] {
        text(key)?;
    }
    Ok(ObjectMeta {
        name: text("name")?,
        namespace: text("namespace")?,
        uid: text("uid")?,
        ..ObjectMeta::default()
    })
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
    #[error("body is not JSON: {}", quote(.0))]
    NotJson(String),
    /// JSON, but not shaped like an AdmissionReview.
    #[error("body is not an AdmissionReview: {}", quote(.0))]
    NotAdmissionReview(String),
    /// Only `admission.k8s.io/v1` is served.
    #[error("apiVersion is {:?}, expected \"admission.k8s.io/v1\"", quote(.0))]
    WrongApiVersion(String),
    /// Not an `AdmissionReview`.
    #[error("kind is {:?}, expected \"AdmissionReview\"", quote(.0))]
    WrongKind(String),
    /// A review without `request` (a response, perhaps).
    #[error("AdmissionReview has no request")]
    MissingRequest,
    /// A request without the uid its answer must echo.
    #[error("AdmissionReview request has no uid")]
    MissingUid,
    /// The request lacks an object the operation needs.
    #[error(transparent)]
    Incomplete(#[from] crate::drift::DecideError),
    /// An `admission.k8s.io/v1` AdmissionReview whose `request.uid` reads but
    /// whose request does not: the server still answers it as a review (by
    /// `--on-error`), since the apiserver shows an HTTP error only as "failed
    /// calling webhook".
    #[error(
        "AdmissionReview request {} cannot be read: {}",
        quote(uid),
        quote(reason)
    )]
    UnreadableRequest {
        /// The request's uid, for the answer.
        uid: String,
        /// What could not be read.
        reason: String,
    },
    /// A name longer than Kubernetes allows: not from an apiserver, and
    /// never held or echoed (it would key caches and fill answers).
    #[error("request.{field} is {len} bytes, more than the {max} Kubernetes allows")]
    OverLimit {
        /// The field, as `request.` + this.
        field: &'static str,
        /// Its length, in bytes.
        len: usize,
        /// The most Kubernetes allows.
        max: usize,
    },
}

/// The longest uid (the apiserver sends a 36-byte UUID), and the longest of
/// the names Kubernetes validates (DNS subdomains; a namespace is a label).
const MAX_UID: usize = 128;
const MAX_NAME: usize = 253;
const MAX_NAMESPACE: usize = 63;

/// Refuses what no apiserver sends: identifying strings over Kubernetes'
/// own limits.
fn check_lengths(request: &AdmissionRequest<RawObject>) -> Result<(), ReviewError> {
    let fields = [
        ("uid", request.uid.len(), MAX_UID),
        (
            "namespace",
            request.namespace.as_deref().map_or(0, str::len),
            MAX_NAMESPACE,
        ),
        ("name", request.name.len(), MAX_NAME),
        ("kind.group", request.kind.group.len(), MAX_NAME),
        ("kind.version", request.kind.version.len(), MAX_NAME),
        ("kind.kind", request.kind.kind.len(), MAX_NAME),
        ("resource.group", request.resource.group.len(), MAX_NAME),
        ("resource.version", request.resource.version.len(), MAX_NAME),
        (
            "resource.resource",
            request.resource.resource.len(),
            MAX_NAME,
        ),
        (
            "subResource",
            request.sub_resource.as_deref().map_or(0, str::len),
            MAX_NAME,
        ),
    ];
    match fields.into_iter().find(|(_, len, max)| len > max) {
        Some((field, len, max)) => Err(ReviewError::OverLimit { field, len, max }),
        None => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    /// Read only for its uid; any other field may be broken.
    #[serde(default)]
    request: Option<Value>,
}

/// Reads an `admission.k8s.io/v1` AdmissionReview's request, its names
/// within Kubernetes' limits.
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
    check_lengths(&request)?;
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
    let envelope = if is_object {
        serde_json::from_slice::<Envelope>(body).ok()
    } else {
        None
    };
    let text = err.to_string();
    if let Some(env) = envelope {
        let checked = check_envelope(&env.api_version, &env.kind);
        let uid = env
            .request
            .as_ref()
            .and_then(|r| r.get("uid"))
            .and_then(Value::as_str)
            .filter(|uid| !uid.is_empty() && uid.len() <= MAX_UID);
        match (checked, uid) {
            (Err(e), _) if !(env.api_version.is_empty() && env.kind.is_empty()) => return e,
            // Syntax errors (including nesting past the recursion limit)
            // returned above: this body is JSON, only its request is not.
            (Ok(()), Some(uid)) => {
                return ReviewError::UnreadableRequest {
                    uid: uid.to_owned(),
                    reason: text,
                };
            }
            _ => {}
        }
    }
    if text.starts_with("missing field `uid`") {
        return ReviewError::MissingUid;
    }
    ReviewError::NotAdmissionReview(text)
}

/// The `request.uid` of an AdmissionReview read from the first bytes of its
/// body only, for a review refused before it is parsed (the memory budget):
/// it is still answered with its uid, by `--on-error`. The apiserver writes
/// `apiVersion`, `kind`, then `request` with `uid` first, so a few KiB hold
/// it. Skips values without building them; `None` when the prefix ends first.
pub(crate) fn uid_in_prefix(prefix: &[u8]) -> Option<String> {
    let mut s = Scanner { b: prefix, i: 0 };
    s.eat(b'{')?;
    loop {
        let key = s.string()?;
        s.eat(b':')?;
        if key == "request" {
            s.eat(b'{')?;
            loop {
                let field = s.string()?;
                s.eat(b':')?;
                if field == "uid" {
                    return s
                        .string()
                        .filter(|uid| !uid.is_empty() && uid.len() <= MAX_UID);
                }
                s.skip_value()?;
                s.eat(b',')?;
            }
        }
        s.skip_value()?;
        s.eat(b',')?;
    }
}

/// Just enough of a JSON reader for [`uid_in_prefix`].
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.b.get(self.i)?.is_ascii_whitespace() {
            self.i += 1;
        }
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// The end (exclusive) of the string starting at `self.i`.
    fn string_end(&self) -> Option<usize> {
        let mut j = self.i + 1;
        loop {
            match self.b.get(j)? {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        (self.peek()? == b'"').then_some(())?;
        let end = self.string_end()?;
        let text = serde_json::from_slice(&self.b[self.i..end]).ok()?;
        self.i = end;
        Some(text)
    }

    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => self.i = self.string_end()?,
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.i += 1;
                }
                b',' | b':' if depth > 0 => self.i += 1,
                b',' | b':' => return None,
                // A number, true, false or null: at least one byte, so
                // every turn of the loop moves on.
                _ => {
                    self.i += 1;
                    while !matches!(self.b.get(self.i)?, b',' | b':' | b'}' | b']' | b'"')
                        && !self.b[self.i].is_ascii_whitespace()
                    {
                        self.i += 1;
                    }
                }
            }
            if depth == 0 && matches!(self.peek(), Some(b',') | None) {
                return Some(());
            }
        }
    }
}

/// The engine's view of a parsed request.
pub(crate) fn view(req: &AdmissionRequest<RawObject>) -> Request<'_> {
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

    /// Strings no apiserver sends would key caches and fill answers and
    /// audit records: refused, and never echoed.
    #[test]
    fn names_over_kubernetes_limits_are_refused_without_echo() {
        let review = |uid: &str, kind: &str, name: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{uid}",
                "kind":{{"group":"","version":"v1","kind":"{kind}"}},"resource":{{"group":"","version":"v1","resource":"pods"}},
                "name":"{name}","operation":"CREATE","userInfo":{{}},"object":{{}}}}}}"#
            )
        };
        assert!(parse(review("u", "Pod", "p").as_bytes()).is_ok());
        let long = "x".repeat(60_000);
        for (body, field) in [
            (review(&long, "Pod", "p"), "uid"),
            (review("u", &long, "p"), "kind.kind"),
            (review("u", "Pod", &long), "name"),
        ] {
            let e = err(&body);
            assert!(
                e.starts_with(&format!("request.{field} is 60000 bytes")),
                "{e}"
            );
            assert!(e.len() < 200, "{e}");
        }
        let broken = review(&long, "Pod", "p").replace(r#""object":{}"#, r#""object":7"#);
        assert!(!err(&broken).contains(&long));
    }

    #[test]
    fn metadata_the_decision_reads_must_be_shaped_as_kubernetes_types_it() {
        let with_meta = |meta: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{
                "uid":"u-1","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},
                "resource":{{"group":"","version":"v1","resource":"configmaps"}},
                "operation":"CREATE","userInfo":{{}},"object":{{"metadata":{meta}}}}}}}"#
            )
        };
        let req = parse(
            with_meta(r#"{"name":"a","namespace":"n","uid":"x","labels":{"k":"v"}}"#).as_bytes(),
        )
        .unwrap();
        let meta = &req.object.as_ref().unwrap().metadata;
        assert_eq!(
            (
                meta.name.as_deref(),
                meta.namespace.as_deref(),
                meta.uid.as_deref()
            ),
            (Some("a"), Some("n"), Some("x"))
        );
        for (meta, named) in [
            (r#"[]"#, "metadata is not an object"),
            (r#"{"labels":{"k":1}}"#, "metadata.labels.k is not a string"),
            (
                r#"{"annotations":["a"]}"#,
                "metadata.annotations is not a map of strings",
            ),
            (r#"{"name":7}"#, "metadata.name is not a string"),
            (
                r#"{"ownerReferences":{}}"#,
                "metadata.ownerReferences is not a list",
            ),
            (r#"{"ownerReferences":[1]}"#, "not an object"),
        ] {
            match parse(with_meta(meta).as_bytes()).unwrap_err() {
                ReviewError::UnreadableRequest { reason, .. } => {
                    assert!(reason.contains(named), "{meta}: {reason}")
                }
                other => panic!("{meta}: {other}"),
            }
        }
    }

    #[test]
    fn the_uid_is_read_from_a_prefix_without_parsing_the_rest() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/deployment-update-image.json"
        ))
        .unwrap();
        let uid = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";
        let compact = serde_json::to_vec(&serde_json::from_slice::<Value>(&body).unwrap()).unwrap();
        for body in [&body, &compact] {
            let at = body
                .windows(uid.len())
                .position(|w| w == uid.as_bytes())
                .unwrap();
            assert_eq!(
                uid_in_prefix(&body[..at + uid.len() + 1]).as_deref(),
                Some(uid)
            );
            assert_eq!(uid_in_prefix(&body[..at + uid.len()]), None);
        }
        // Fields before the uid are skipped, nested values and escapes included.
        let text = br#"{"kind":"AdmissionReview","x":{"uid":"no","a":[1,{"b":"\"}"}]},"request":{"k":{"uid":"no"},"n":-1.5e3,"uid":"u\u0031"}}"#;
        assert_eq!(uid_in_prefix(text).as_deref(), Some("u1"));
        for text in [
            &b"[1]"[..],
            b"{\"request\":{\"uid\":\"\"}}",
            b"{\"request\":[]}",
            b"",
        ] {
            assert_eq!(uid_in_prefix(text), None);
        }
    }

    #[test]
    fn a_v1_review_with_a_uid_but_a_broken_request_keeps_its_uid() {
        let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u-1","resource":{"group":"","version":"v1","resource":"pods"},
            "operation":"CREATE","userInfo":{},"object":{}}}"#;
        match parse(body.as_bytes()).unwrap_err() {
            ReviewError::UnreadableRequest { uid, reason } => {
                assert_eq!(uid, "u-1");
                assert!(reason.contains("missing field `kind`"), "{reason}");
            }
            other => panic!("{other}"),
        }
        // Another apiVersion stays a plain error, uid or not.
        let beta = body.replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
        assert!(matches!(
            parse(beta.as_bytes()).unwrap_err(),
            ReviewError::WrongApiVersion(_)
        ));
    }
}
