//! The input invariant over generated sequences (ARCHITECTURE.md principles 4
//! and 5): after any sequence of writes by persons, an authorized break-glass
//! included (armed by hand or as the plugin arms it, used, ended in force,
//! expired and swept), no later manual write is judged more loosely than it
//! was before the sequence. And ownership is the union of the claims: adding
//! a detector's claim to an object never judges a write more loosely.
//!
//! Policies vary in mode, precision, detectors and ignore rules; objects in
//! which detectors claim them, consistently or not. The oracle is verdicts of
//! the public `judge`, ranked allow < audit < warn < deny.
use std::sync::Arc;

use driftguard::drift::{Manager as DgManager, Verdict};
use driftguard::sources::Sources;
use driftguard::{Endpoint, Policy, judge_request};
use serde_json::{Value, json};

use crate::two_step::{self, Edit, Kind, Manager, RULES, Scenario, judged_fields};

const ALICE: (&str, &[&str]) = ("alice", &["developers", "system:authenticated"]);
const SRE: (&str, &[&str]) = ("bob", &["sre", "system:authenticated"]);
/// The break-glass a step arms expires an hour after the first clock.
const ARMED_UNTIL: &str = "2026-11-29T11:00:00Z";
const EARLY: &str = "2026-11-29T10:00:00Z";
/// After every break-glass expired: when the sweeper ends them and the probe writes run.
const LATE: &str = "2026-11-29T12:00:00Z";

const MODES: [&str; 3] = ["enforce", "warn", "audit"];

/// Extra claims an object may carry beside its manager's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    FluxLabels,
    InstanceLabel,
    /// A tracking id that names another object: no claim, and no claim off.
    CopiedTrackingId,
    HelmLabels,
}
const EXTRAS: [Extra; 4] = [
    Extra::FluxLabels,
    Extra::InstanceLabel,
    Extra::CopiedTrackingId,
    Extra::HelmLabels,
];

#[derive(Clone, Debug)]
pub enum Step {
    /// A write by alice (no break-glass rights) or bob (sre, may break glass).
    Write { sre: bool, edits: Vec<Edit> },
    /// bob arms a break-glass, by hand (the two annotations) or as the plugin
    /// does (with the label, the pause marker and Flux's opt-out), with edits.
    Arm { plugin: bool, edits: Vec<Edit> },
    /// bob ends the break-glass while it is in force.
    End,
    /// alice or bob deletes the object and creates it again with edits (a
    /// CREATE before the tool's next apply).
    Recreate { sre: bool, edits: Vec<Edit> },
}

#[derive(Clone, Debug)]
pub struct Sequence {
    pub mode: &'static str,
    pub owned_fields: bool,
    pub argocd: bool,
    pub instance_label: bool,
    pub flux: bool,
    pub rules: Vec<&'static str>,
    pub manager: Manager,
    pub extras: Vec<Extra>,
    pub steps: Vec<Step>,
}

struct Bytes<'a>(std::slice::Iter<'a, u8>);

impl Bytes<'_> {
    fn next(&mut self) -> usize {
        self.0.next().copied().unwrap_or(0) as usize
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.next() % items.len()].clone()
    }
    fn flag(&mut self) -> bool {
        self.next() % 2 == 1
    }
}

/// What a step may write: the decision inputs among the keys, and spec fields.
const KEYS: [(&str, bool); 16] = [
    ("driftguard.io/mode", false),
    ("argocd.argoproj.io/ignore-differences", false),
    ("argocd.argoproj.io/compare-options", false),
    ("argocd.argoproj.io/sync-options", false),
    ("argocd.argoproj.io/tracking-id", false),
    ("argocd.argoproj.io/installation-id", false),
    ("meta.helm.sh/release-name", false),
    ("kustomize.toolkit.fluxcd.io/reconcile", false),
    ("kustomize.toolkit.fluxcd.io/reconcile", true),
    ("kustomize.toolkit.fluxcd.io/ssa", false),
    ("kustomize.toolkit.fluxcd.io/prune", true),
    ("helm.toolkit.fluxcd.io/driftDetection", false),
    ("driftguard.io/break-glass-paused", false),
    ("driftguard.io/break-glass", true),
    ("app.kubernetes.io/instance", true),
    ("kustomize.toolkit.fluxcd.io/name", true),
];
const VALUES: [&str; 8] = [
    "audit",
    "disabled",
    "{jsonPointers: [/spec]}",
    "IgnoreExtraneous",
    "Prune=false",
    "Ignore",
    "other",
    "kustomize.toolkit.fluxcd.io/reconcile",
];

fn edits(b: &mut Bytes, kind: Kind) -> Vec<Edit> {
    (0..1 + b.next() % 3)
        .map(|_| match b.next() % 7 {
            0..=2 => {
                let (key, label) = b.pick(&KEYS);
                let value = (!b.next().is_multiple_of(4)).then(|| b.pick(&VALUES));
                if label {
                    Edit::Label(key, value)
                } else {
                    Edit::Annotation(key, value)
                }
            }
            3 => Edit::Field(b.pick(judged_fields(kind)), 1 + (b.next() % 3) as i64),
            4 => Edit::Claim(
                b.pick(&["hpa", "argocd-controller", "kustomize-controller"]),
                b.pick(judged_fields(kind)),
            ),
            5 => Edit::Disown(b.pick(&["argocd-controller", "kustomize-controller"])),
            _ => b.pick(&[
                Edit::ControllerOwner(false),
                Edit::ClearOwners,
                Edit::Finalizer,
            ]),
        })
        .collect()
}

impl Sequence {
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut b = Bytes(data.iter());
        let mode = b.pick(&MODES);
        let owned_fields = b.next() % 3 == 0;
        let (argocd, instance_label, flux) = (b.next() % 5 != 0, b.flag(), b.next() % 5 != 0);
        let rules = (0..b.next() % 3).map(|_| b.pick(&RULES)).collect();
        let manager = b.pick(&[
            Manager::ArgoAnnotation,
            Manager::ArgoLabel,
            Manager::FluxKustomization,
            Manager::FluxHelm,
        ]);
        let extras = EXTRAS.into_iter().filter(|_| b.next() % 4 == 0).collect();
        let steps = (0..1 + b.next() % 5)
            .map(|_| match b.next() % 6 {
                // Not under ownedFields in warn or audit: there a person's
                // warned DELETE and CREATE leave an object the tool has not
                // applied, whose changes look unowned until it does (the
                // residual in docs/threat-model.md, section 8).
                5 if !(owned_fields && mode != "enforce") => Step::Recreate {
                    sre: b.flag(),
                    edits: edits(&mut b, Kind::Deployment),
                },
                0 | 1 => Step::Write {
                    sre: b.flag(),
                    edits: edits(&mut b, Kind::Deployment),
                },
                2 | 3 => Step::Arm {
                    plugin: b.flag(),
                    edits: edits(&mut b, Kind::Deployment),
                },
                _ => Step::End,
            })
            .collect();
        Sequence {
            mode,
            owned_fields,
            argocd,
            instance_label,
            flux,
            rules,
            manager,
            extras,
            steps,
        }
    }

    pub fn policy(&self) -> Policy {
        let mut text = format!(
            "mode: {}\nbreakGlass: {{allowedGroups: [sre], maxDuration: 4h}}\n",
            self.mode
        );
        text.push_str(&format!(
            "gitops: {{argocd: {{enabled: {}, instanceLabel: '{}'}}, flux: {{enabled: {}}}}}\n",
            self.argocd,
            if self.instance_label {
                "app.kubernetes.io/instance"
            } else {
                ""
            },
            self.flux
        ));
        if !self.rules.is_empty() {
            text.push_str("ignoreDifferences:\n");
            for r in &self.rules {
                text.push_str(&format!("  - {r}\n"));
            }
        }
        if self.owned_fields {
            text.push_str("precision: ownedFields\n");
        }
        Policy::from_yaml(&text, "sequence.yaml").expect("the sequence policy loads")
    }

    /// The stored object: the manager's, with `extras` claims added.
    pub fn stored(&self, extras: &[Extra]) -> Value {
        let mut obj = Scenario {
            rules: vec![],
            owned_fields: false,
            kind: Kind::Deployment,
            manager: self.manager,
            first: vec![],
            second: two_step::Second::Delete,
            honest_second: true,
            paused: false,
            first_via_status: false,
        }
        .stored();
        let meta = &mut obj["metadata"];
        for extra in extras {
            match extra {
                Extra::FluxLabels => {
                    meta["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!("apps");
                    meta["labels"]["kustomize.toolkit.fluxcd.io/namespace"] = json!("flux-system");
                }
                Extra::HelmLabels => {
                    meta["labels"]["helm.toolkit.fluxcd.io/name"] = json!("web");
                    meta["labels"]["helm.toolkit.fluxcd.io/namespace"] = json!("flux-system");
                }
                Extra::InstanceLabel => {
                    meta["labels"]["app.kubernetes.io/instance"] = json!("other-app");
                }
                // Over the manager's own id it would remove that claim, not add one.
                Extra::CopiedTrackingId if matches!(self.manager, Manager::ArgoAnnotation) => {}
                Extra::CopiedTrackingId => {
                    meta["annotations"]["argocd.argoproj.io/tracking-id"] =
                        json!("myapp:apps/Deployment:production/other");
                }
            }
        }
        obj
    }

    /// The object the steps leave, each write applied only if allowed, and
    /// any break-glass left then ended by the sweeper's write after expiry.
    pub fn after_steps(&self, policy: &Policy) -> Value {
        let mut obj = self.stored(&self.extras);
        for step in &self.steps {
            let by_alice = matches!(
                step,
                Step::Write { sre: false, .. } | Step::Recreate { sre: false, .. }
            );
            let (user, mut new) = (if by_alice { ALICE } else { SRE }, obj.clone());
            if let Step::Recreate { edits, .. } = step {
                edits.iter().for_each(|e| two_step::apply(&mut new, e));
                let allows = |op, old: Option<&Value>, new: Option<&Value>| {
                    verdict(policy, user, op, old, new, EARLY) != Some(Verdict::Deny)
                };
                if allows("DELETE", Some(&obj), None) && allows("CREATE", None, Some(&new)) {
                    obj = new;
                }
                continue;
            }
            match step {
                Step::Write { edits, .. } => {
                    edits.iter().for_each(|e| two_step::apply(&mut new, e))
                }
                Step::Arm { plugin, edits } => {
                    arm(&mut new, *plugin, self.manager);
                    edits.iter().for_each(|e| two_step::apply(&mut new, e));
                }
                Step::End => two_step::apply(&mut new, &Edit::EndBreakGlass),
                Step::Recreate { .. } => unreachable!("handled above"),
            }
            if allowed(policy, user, &obj, &new, EARLY) {
                obj = new;
            }
        }
        let mut swept = obj.clone();
        two_step::apply(&mut swept, &Edit::EndBreakGlass);
        if swept != obj && allowed(policy, ALICE, &obj, &swept, LATE) {
            obj = swept;
        }
        obj
    }

    /// The writes alice may try afterwards, with how strictly each is judged
    /// on `obj`.
    pub fn probes(&self, policy: &Policy, obj: &Value) -> Vec<(String, u8)> {
        let mut out = Vec::new();
        for field in judged_fields(Kind::Deployment) {
            let mut new = obj.clone();
            two_step::set(&mut new, field, json!(7));
            let v = verdict(policy, ALICE, "UPDATE", Some(obj), Some(&new), LATE);
            out.push((format!("edit {field}"), rank(v)));
        }
        let v = verdict(policy, ALICE, "DELETE", Some(obj), None, LATE);
        out.push(("delete".into(), rank(v)));
        out
    }

    /// Both invariants; the error says how one broke.
    pub fn check(&self) -> Result<(), String> {
        RECORDS.with(|m| *m.borrow_mut() = self.listers());
        let policy = self.policy();
        let before = self.probes(&policy, &self.stored(&self.extras));
        let after_obj = self.after_steps(&policy);
        let after = self.probes(&policy, &after_obj);
        for ((what, was), (_, now)) in before.iter().zip(&after) {
            if now < was {
                return Err(format!(
                    "loosened: {what} was judged {was}, after the steps {now}; object now {after_obj}"
                ));
            }
        }
        for dropped in &self.extras {
            let fewer: Vec<Extra> = self
                .extras
                .iter()
                .copied()
                .filter(|e| e != dropped)
                .collect();
            let less = self.probes(&policy, &self.stored(&fewer));
            for ((what, all), (_, some)) in before.iter().zip(&less) {
                if all < some {
                    return Err(format!(
                        "the claim {dropped:?} loosened {what}: {some} without it, {all} with it"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A policy of the generated space: mode, precision, detectors (Argo CD,
/// its instance label, Flux) and ignore rules; break-glass for group `sre`.
pub fn policy_yaml(
    mode: &str,
    owned_fields: bool,
    (argocd, instance_label, flux): (bool, bool, bool),
    rules: &[&str],
) -> String {
    let label = if instance_label {
        "app.kubernetes.io/instance"
    } else {
        ""
    };
    let mut text = format!(
        "mode: {mode}\nbreakGlass: {{allowedGroups: [sre], maxDuration: 4h}}\n\
         gitops: {{argocd: {{enabled: {argocd}, instanceLabel: '{label}'}}, flux: {{enabled: {flux}}}}}\n"
    );
    if !rules.is_empty() {
        text.push_str("ignoreDifferences:\n");
        for r in rules {
            text.push_str(&format!("  - {r}\n"));
        }
    }
    if owned_fields {
        text.push_str("precision: ownedFields\n");
    }
    text
}

/// Every policy of the space without ignore rules (a rule only allows
/// more), named: what tests/filter_soundness.rs registers.
pub fn policy_space() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for mode in MODES {
        for owned in [false, true] {
            for bits in 0..8u8 {
                let detectors = (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
                let name = format!("{mode}-owned{owned}-detectors{bits}");
                out.push((name, policy_yaml(mode, owned, detectors, &[])));
            }
        }
    }
    out
}

/// What `kubectl driftguard break-glass` writes, or a person by hand.
fn arm(obj: &mut Value, plugin: bool, manager: Manager) {
    let a = &mut obj["metadata"]["annotations"];
    a["driftguard.io/break-glass"] = json!("INC-1");
    a["driftguard.io/break-glass-expires"] = json!(ARMED_UNTIL);
    if plugin {
        let opt_out = match manager {
            Manager::FluxKustomization => Some("kustomize.toolkit.fluxcd.io/reconcile"),
            Manager::FluxHelm => Some("helm.toolkit.fluxcd.io/driftDetection"),
            _ => None,
        };
        a["driftguard.io/break-glass-paused"] =
            json!(opt_out.unwrap_or("argocd.argoproj.io/skip-reconcile"));
        if let Some(key) = opt_out {
            a[key] = json!("disabled");
        }
        obj["metadata"]["labels"]["driftguard.io/break-glass"] = json!("true");
    }
}

fn rank(v: Option<Verdict>) -> u8 {
    match v {
        None | Some(Verdict::Allow) => 0,
        Some(Verdict::Audit) => 1,
        Some(Verdict::Warn) => 2,
        Some(Verdict::Deny) => 3,
    }
}

fn allowed(policy: &Policy, who: (&str, &[&str]), old: &Value, new: &Value, at: &str) -> bool {
    verdict(policy, who, "UPDATE", Some(old), Some(new), at) != Some(Verdict::Deny)
}

/// The verdict with the tools' records listing the object (`--watch-*`,
/// `plannedCreates: guard`): what guards it between a DELETE and the tool's
/// next apply.
fn verdict(
    policy: &Policy,
    (user, groups): (&str, &[&str]),
    operation: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    at: &str,
) -> Option<Verdict> {
    let body = two_step::review_by(user, groups, operation, old, new, "");
    let req = driftguard::request::parse(&body).ok()?;
    let mut listers = RECORDS.with(|m| m.borrow().clone()).into_iter();
    let first = listers.next().map(|m| (LISTED.into(), Arc::new(m)));
    let more: Vec<DgManager> = listers.collect();
    let sources = Sources {
        planned: Arc::new(first.into_iter().collect()),
        more_listers: Arc::new(
            (!more.is_empty())
                .then(|| (LISTED.into(), more))
                .into_iter()
                .collect(),
        ),
        ..Sources::default()
    };
    let judged = judge_request(
        policy,
        &req,
        Endpoint::Validate,
        None,
        Some(&sources),
        at.parse().ok()?,
        &driftguard::deadline::Deadline::none(),
    )
    .ok()?;
    Some(judged.decision.verdict)
}

/// The object as the tools' records name it.
const LISTED: &str = "apps/Deployment:production/web";

thread_local! {
    /// Who lists the object in the sequence being checked.
    static RECORDS: std::cell::RefCell<Vec<DgManager>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Sequence {
    /// Whose records list the stored object: every tool that claims it and
    /// that the policy watches (a disabled detector's sources are not read).
    /// Each claim is its tool's: the manager's own, Flux's labels (the
    /// Kustomization's inventory, the HelmRelease's), and the instance label
    /// `other-app`, by which Application other-app tracks the object and so
    /// lists it in `status.resources` (Argo CD lists what carries its label,
    /// in Git or not, `requiresPruning`). A copied tracking id is no claim,
    /// and no Application lists the object for it. An instance label naming
    /// no Application that lists the object is a claim only driftguard sees:
    /// in warn and audit a person may delete it and create it again without
    /// the claim, and nothing remembers the name (docs/threat-model.md,
    /// section 8).
    fn listers(&self) -> Vec<DgManager> {
        let argo = matches!(self.manager, Manager::ArgoAnnotation | Manager::ArgoLabel);
        let own = lister(self.manager, "myapp");
        let claims = std::iter::once((own, if argo { self.argocd } else { self.flux })).chain(
            self.extras.iter().filter_map(|e| match e {
                Extra::FluxLabels => Some((lister(Manager::FluxKustomization, ""), self.flux)),
                Extra::HelmLabels => Some((lister(Manager::FluxHelm, ""), self.flux)),
                Extra::InstanceLabel => {
                    Some((lister(Manager::ArgoLabel, "other-app"), self.argocd))
                }
                Extra::CopiedTrackingId => None,
            }),
        );
        let mut out: Vec<DgManager> = Vec::new();
        for (m, _) in claims.filter(|(_, watched)| *watched) {
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }
}

/// The manager whose records list the stored object (`application`, for
/// Argo CD).
fn lister(manager: Manager, application: &str) -> DgManager {
    match manager {
        Manager::ArgoAnnotation | Manager::ArgoLabel => DgManager::ArgoCd {
            application: application.into(),
            application_namespace: None,
        },
        Manager::FluxKustomization => DgManager::FluxKustomization {
            namespace: "flux-system".into(),
            name: "apps".into(),
        },
        Manager::FluxHelm => DgManager::FluxHelmRelease {
            namespace: "flux-system".into(),
            name: "web".into(),
        },
    }
}
