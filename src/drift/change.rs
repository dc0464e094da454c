//! The change a write makes, read once from the request: a CREATE carries
//! the new object, a DELETE the stored one, an UPDATE both, and a `…/scale`
//! write the Scale before and after. The steps match on it, so none of them
//! meets an UPDATE without its stored object. A request that makes no change
//! driftguard judges gets the reason instead ([`OutOfScope`]).

use std::fmt;

use serde_json::Value;

use super::{DecideError, Operation, Request, excluded};

#[derive(Clone, Copy, Debug)]
pub enum Change<'a> {
    Create {
        new: &'a Value,
    },
    /// Also a subresource write that carries the object (`status`, `finalize`...).
    Update {
        old: &'a Value,
        new: &'a Value,
    },
    Delete {
        old: &'a Value,
    },
    /// The Scale objects of a `…/scale` write; judged on the parent.
    Scale {
        old: &'a Value,
        new: &'a Value,
    },
}

/// Why a write is allowed without a drift check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutOfScope {
    /// A runtime kind no repository holds ([`excluded`]), by resource.
    Excluded(String),
    Connect,
    /// A subresource write that carries another kind (an Eviction, a TokenRequest).
    OtherKind {
        sub_resource: String,
        kind: String,
    },
    /// A child (controller `ownerReference`): its owner is judged.
    ChildOf(String),
    /// The GitOps tool's own per-object opt-out, described.
    OptedOut(String),
    NotManaged,
}

impl fmt::Display for OutOfScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutOfScope::Excluded(resource) => write!(f, "{resource} are never judged"),
            OutOfScope::Connect => f.write_str("CONNECT is not a write"),
            OutOfScope::OtherKind { sub_resource, kind } => {
                write!(
                    f,
                    "subresource {sub_resource} carries a {kind}, not the object"
                )
            }
            OutOfScope::ChildOf(owner) => write!(f, "child of {owner}"),
            OutOfScope::OptedOut(why) => f.write_str(why),
            OutOfScope::NotManaged => f.write_str("not GitOps-managed"),
        }
    }
}

impl<'a> Change<'a> {
    /// The change `req` makes: `Ok(Err(why))` when it makes none that is
    /// judged, an error when it lacks an object its operation carries.
    pub fn of(req: &Request<'a>) -> Result<Result<Self, OutOfScope>, DecideError> {
        if excluded::is_excluded(req.resource_group, req.resource) {
            return Ok(Err(OutOfScope::Excluded(req.resource.to_owned())));
        }
        let op = req.operation.as_str();
        let new = || req.object.ok_or(DecideError::MissingObject(op));
        let old = || req.old_object.ok_or(DecideError::MissingOldObject(op));
        Ok(Ok(match (req.operation, req.sub_resource) {
            (Operation::Connect, _) => return Ok(Err(OutOfScope::Connect)),
            (_, "scale") => {
                let new = new()?;
                Change::Scale { old: old()?, new }
            }
            (Operation::Create, "") => Change::Create { new: new()? },
            (Operation::Delete, "") => Change::Delete { old: old()? },
            // `status`, `finalize`, `ephemeralcontainers`, `resize`...: the
            // apiserver's strategies keep some of what they carry besides the
            // subresource's own fields (a Deployment's annotations, a
            // Service's labels), so such a write is judged like any UPDATE;
            // `status` itself is never compared.
            (Operation::Update, sub) if sub.is_empty() || carries_the_object(req) => {
                let new = new()?;
                Change::Update { old: old()?, new }
            }
            (_, other) => {
                return Ok(Err(OutOfScope::OtherKind {
                    sub_resource: other.to_owned(),
                    kind: req.kind.to_owned(),
                }));
            }
        }))
    }
}

/// A subresource write whose old and new objects are the resource itself
/// (`status`, `finalize`, ...), not another kind (an Eviction, a
/// TokenRequest, a Binding), so they can be compared.
pub(crate) fn carries_the_object(req: &Request) -> bool {
    fn kind_of(o: Option<&Value>) -> Option<&str> {
        o?.get("kind")?.as_str()
    }
    let (new, old) = (kind_of(req.object), kind_of(req.old_object));
    new.is_some() && new == old && new == Some(req.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request<'a>(
        operation: Operation,
        (resource, sub_resource): (&'a str, &'a str),
        object: Option<&'a Value>,
        old_object: Option<&'a Value>,
    ) -> Request<'a> {
        Request {
            operation,
            group: "",
            kind: "Pod",
            resource_group: "",
            resource,
            sub_resource,
            name: "p",
            namespace: "default",
            username: "alice",
            groups: &[],
            object,
            old_object,
            dry_run: false,
        }
    }

    #[test]
    fn each_operation_carries_exactly_its_objects() {
        let pod = json!({"kind": "Pod"});
        let eviction = json!({"kind": "Eviction"});
        let (o, u, d) = (Operation::Create, Operation::Update, Operation::Delete);
        let of = |op, at, new, old| Change::of(&request(op, at, new, old));
        let pods = ("pods", "");
        assert!(matches!(
            of(o, pods, Some(&pod), None),
            Ok(Ok(Change::Create { .. }))
        ));
        assert!(matches!(
            of(u, pods, Some(&pod), Some(&pod)),
            Ok(Ok(Change::Update { .. }))
        ));
        assert!(matches!(
            of(d, pods, None, Some(&pod)),
            Ok(Ok(Change::Delete { .. }))
        ));
        let status = ("pods", "status");
        assert!(matches!(
            of(u, status, Some(&pod), Some(&pod)),
            Ok(Ok(Change::Update { .. }))
        ));
        let scale = ("pods", "scale");
        assert!(matches!(
            of(u, scale, Some(&pod), Some(&pod)),
            Ok(Ok(Change::Scale { .. }))
        ));
        assert_eq!(
            of(u, pods, Some(&pod), None).unwrap_err(),
            DecideError::MissingOldObject("UPDATE")
        );
        assert_eq!(
            of(d, pods, None, None).unwrap_err(),
            DecideError::MissingOldObject("DELETE")
        );
        assert_eq!(
            of(o, pods, None, None).unwrap_err(),
            DecideError::MissingObject("CREATE")
        );
        let why = |op, at, new, old| of(op, at, new, old).unwrap().unwrap_err().to_string();
        let evict = Request {
            kind: "Eviction",
            ..request(o, ("pods", "eviction"), Some(&eviction), None)
        };
        assert_eq!(
            Change::of(&evict).unwrap().unwrap_err().to_string(),
            "subresource eviction carries a Eviction, not the object"
        );
        assert_eq!(
            why(Operation::Connect, ("pods", "exec"), None, None),
            "CONNECT is not a write"
        );
        assert_eq!(
            why(o, ("events", ""), Some(&pod), None),
            "events are never judged"
        );
    }
}
