//! `gitops.argocd`: the keys Argo CD marks what it manages with. A key no
//! object can carry (empty, or not a Kubernetes key) claims nothing, so
//! every object Argo CD tracks by it would be unmanaged and skipped: it is
//! refused when the policy loads. The instance label keeps its documented
//! off switch, `""`, which is written on purpose (Argo CD tracks by
//! annotation since v3, and a watched argocd-cm names the label it tracks by
//! otherwise); the annotation has none (`enabled: false` turns Argo CD's
//! marks off as a whole).

use super::FieldError;
use super::schema::ArgoDetectorFile;
use crate::text::is_qualified_name;

/// How Argo CD's ownership marks are read (`gitops.argocd`).
#[derive(Debug)]
pub(crate) struct ArgoDetector {
    /// The tracking annotation's key.
    pub(crate) tracking_annotation: String,
    /// The instance label's key; `None`: the label detector is off.
    pub(crate) instance_label: Option<String>,
    /// Argo CD's `installationID` (argocd-cm), when it has one: only objects
    /// carrying it are tracked by the Applications driftguard reads.
    pub(crate) installation_id: Option<String>,
}

/// What a key must be, as the errors say it.
const KEY_RULE: &str = "a key is `name` or `prefix/name`: a name of at most 63 characters, alphanumeric at both ends and `-`, `_` or `.` between, the prefix a DNS subdomain";

impl ArgoDetector {
    /// The detector `file` describes; `None` when Argo CD's marks are off.
    pub(crate) fn compile(file: &ArgoDetectorFile) -> Result<Option<Self>, FieldError> {
        let annotation = &file.tracking_annotation;
        if !is_qualified_name(annotation) {
            return Err(FieldError::DetectorKey {
                field: "gitops.argocd.trackingAnnotation",
                why: format!(
                    "{} ({KEY_RULE}): no object carries it, so every object Argo CD tracks by annotation would be unmanaged and skipped. Argo CD's is `argocd.argoproj.io/tracking-id`; `gitops.argocd.enabled: false` stops reading Argo CD's marks",
                    not_a_key(annotation, "an annotation")
                ),
            });
        }
        let label = &file.instance_label;
        if !label.is_empty() && !is_qualified_name(label) {
            return Err(FieldError::DetectorKey {
                field: "gitops.argocd.instanceLabel",
                why: format!(
                    "{} ({KEY_RULE}): no object carries it, so every object Argo CD tracks by label would be unmanaged and skipped. Argo CD's is `app.kubernetes.io/instance`; `\"\"` turns the label detector off",
                    not_a_key(label, "a label")
                ),
            });
        }
        Ok(file.enabled.then(|| ArgoDetector {
            tracking_annotation: annotation.clone(),
            instance_label: Some(label.clone()).filter(|l| !l.is_empty()),
            installation_id: Some(file.installation_id.clone()).filter(|i| !i.is_empty()),
        }))
    }
}

fn not_a_key(key: &str, what: &str) -> String {
    if key.is_empty() {
        "is empty".to_owned()
    } else {
        format!("`{key}` is not {what} key")
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;

    fn load(argocd: &str) -> Result<Policy, String> {
        Policy::from_yaml(&format!("gitops: {{argocd: {argocd}}}\n"), "p.yaml")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_detector_key_no_object_can_carry_is_refused() {
        for (argocd, field) in [
            ("{trackingAnnotation: ''}", "trackingAnnotation: is empty"),
            (
                "{trackingAnnotation: 'a b'}",
                "trackingAnnotation: `a b` is not an annotation key",
            ),
            (
                "{trackingAnnotation: 'example.com/'}",
                "trackingAnnotation: `example.com/`",
            ),
            (
                "{trackingAnnotation: 'Not_A.Domain/x'}",
                "trackingAnnotation: `Not_A.Domain/x`",
            ),
            (
                "{enabled: false, trackingAnnotation: ''}",
                "trackingAnnotation: is empty",
            ),
            (
                "{instanceLabel: 'app instance'}",
                "instanceLabel: `app instance` is not a label key",
            ),
            ("{instanceLabel: '-x'}", "instanceLabel: `-x`"),
        ] {
            let err = load(argocd).unwrap_err();
            assert!(
                err.starts_with(&format!("p.yaml: gitops.argocd.{field}"))
                    && err.contains("unmanaged"),
                "{argocd}: {err}"
            );
        }
        let err = load("{trackingAnnotation: ''}").unwrap_err();
        assert!(err.contains("`gitops.argocd.enabled: false`"), "{err}");
    }

    #[test]
    fn valid_keys_load_and_an_empty_instance_label_turns_the_label_off() {
        let p = load("{trackingAnnotation: example.com/owner, instanceLabel: team}").unwrap();
        let argo = p.argocd.unwrap();
        assert_eq!(argo.tracking_annotation, "example.com/owner");
        assert_eq!(argo.instance_label.as_deref(), Some("team"));
        let off = load("{instanceLabel: ''}").unwrap();
        assert_eq!(off.argocd.unwrap().instance_label, None);
        assert!(load("{enabled: false}").unwrap().argocd.is_none());
    }
}
