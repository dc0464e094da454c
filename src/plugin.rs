//! `kubectl-driftguard`: the kubectl plugin. It talks to the apiserver with
//! the user's own kubeconfig and credentials, never driftguard's.
//!
//! Exit codes: 0 ok, 1 the answer is "no" (refused, denied), 2 usage or
//! access error (the message names the object or the forbidden request).

// Every print goes through `out::Out`, which escapes terminal controls
// (clippy.toml lists the macros and functions that would go around it).
#![deny(clippy::disallowed_macros, clippy::disallowed_methods)]

mod api;
mod breakglass_command;
mod explain;
mod installation;
pub(crate) mod out;
mod preview;
mod report_command;
mod status;
mod trusted_reach;

use std::borrow::Cow;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::policy::Policy;
use api::{Api, ConnectArgs, Refusal};
use out::{Out, errln};

// The kubectl plugin's command line: a doc comment here would become clap's
// help text, which `about` already gives.
#[allow(missing_docs)]
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-driftguard",
    bin_name = "kubectl driftguard",
    version,
    about = "driftguard from the terminal: explain, preview, break-glass, status and report",
    after_help = "Examples:\n  \
        kubectl driftguard explain deploy/web -n shop\n  \
        kubectl driftguard preview deploy/web -n shop --replicas 5\n  \
        kubectl driftguard break-glass deploy/web -n shop --reason \"INC-7 checkout down\" --for 1h\n  \
        kubectl driftguard status\n  \
        kubectl driftguard report --since 168h"
)]
pub struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The ConfigMap holding the policy in force, NAMESPACE/NAME. Default:
    /// driftguard-policy in --driftguard-namespace (the chart installed as
    /// release driftguard), else the one ConfigMap there labelled
    /// app.kubernetes.io/name=driftguard whose name ends in -policy.
    #[arg(long, global = true, env = "DRIFTGUARD_POLICY_CONFIGMAP")]
    policy_configmap: Option<String>,
    /// The namespace driftguard is installed in (the Helm release's): the
    /// only place the policy is looked for without --policy-configmap. A
    /// ConfigMap anywhere else, whatever its labels, is anyone's to plant.
    #[arg(
        long,
        global = true,
        env = "DRIFTGUARD_NAMESPACE",
        default_value = "driftguard"
    )]
    driftguard_namespace: String,
    /// The key of the policy in that ConfigMap.
    #[arg(long, global = true, default_value = "policy.yaml")]
    policy_key: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Set (or with --end remove) break-glass on an object, if driftguard's answer to a dry run lets you.
    #[command(after_help = "Examples:\n  \
        kubectl driftguard break-glass deploy/web -n shop --reason \"INC-7 checkout down\" --for 1h\n  \
        kubectl driftguard break-glass deploy/web -n shop --end")]
    BreakGlass(breakglass_command::Args),
    /// Server-side dry run of a change as you: what driftguard would answer.
    #[command(after_help = "Examples:\n  \
        kubectl driftguard preview deploy/web -n shop --set-image web=web:2\n  \
        kubectl driftguard preview deploy/web -n shop --filename web.yaml")]
    Preview(preview::Args),
    /// Who manages an object, the mode in force and why, its ignore rules, break-glass.
    #[command(after_help = "Examples:\n  \
        kubectl driftguard explain deploy/web -n shop\n  \
        kubectl driftguard explain configmap/settings -n shop -o json")]
    Explain(explain::Args),
    /// Both webhook configurations, caBundle, failurePolicy, endpoints, the policy in force,
    /// break-glass in force, and who else may act as a trusted identity.
    #[command(after_help = "Examples:\n  \
        kubectl driftguard status\n  \
        kubectl driftguard status --driftguard-namespace platform -o yaml")]
    Status(status::Args),
    /// What enforce would have denied over a window, from the driftguard pods' audit records:
    /// by namespace, object, user and drifted path, with ignore rules for the frequent paths.
    #[command(after_help = "Examples:\n  \
        kubectl driftguard report                     # the last 24 hours\n  \
        kubectl driftguard report --since 168h --top 20")]
    Report(report_command::Args),
}

/// Why a command could not give an answer (exit 2). A "no" is not an error:
/// commands return exit code 1 for it.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The command line or its input is wrong.
    #[error("{0}")]
    Usage(String),
    /// The apiserver could not be reached or refused a request (RBAC, not found).
    #[error("{0}")]
    Access(String),
}

impl PluginError {
    /// The apiserver's own message names the verb, resource and object
    /// (`User "alice" cannot get resource "configmaps" ... in the namespace "x"`).
    fn from_refusal(r: Refusal) -> Self {
        PluginError::Access(match r.code {
            403 => format!("forbidden: {}", r.message),
            404 => format!("not found: {}", r.message),
            _ => r.message,
        })
    }
}

/// `-o` for commands that print a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    #[default]
    Text,
    Json,
    Yaml,
}

impl Cli {
    /// Runs the command on a current-thread runtime; the exit code it returns.
    pub fn run(self) -> ExitCode {
        crate::server::tls::install_process_default();
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                errln!("kubectl-driftguard: cannot start the runtime: {e}");
                return ExitCode::from(2);
            }
        };
        match runtime.block_on(self.dispatch()) {
            Ok(code) => code,
            Err(e) => {
                errln!("error: {e}");
                ExitCode::from(2)
            }
        }
    }

    async fn dispatch(self) -> Result<ExitCode, PluginError> {
        if matches!(self.command, Command::Status(_) | Command::Report(_))
            && self.connect.namespace.is_some()
        {
            return Err(PluginError::Usage(
                "status and report are about the installation, not an object: -n/--namespace \
                 does not apply (driftguard's own namespace is --driftguard-namespace)"
                    .into(),
            ));
        }
        let api = Api::connect(&self.connect).await?;
        let source = PolicySource {
            configmap: self.policy_configmap,
            namespace: self.driftguard_namespace,
            key: self.policy_key,
        };
        match self.command {
            Command::BreakGlass(args) => breakglass_command::run(&api, &source, args).await,
            Command::Preview(args) => preview::run(&api, args).await,
            Command::Explain(args) => explain::run(&api, &source, args).await,
            Command::Status(args) => status::run(&api, &source, args).await,
            Command::Report(args) => report_command::run(&api, &source.namespace, args).await,
        }
    }
}

/// Where the policy in force lives in the cluster.
pub struct PolicySource {
    /// `None`: the chart's default, then a search by the chart's labels,
    /// both in `namespace` only.
    configmap: Option<String>,
    namespace: String,
    key: String,
}

/// The chart's ConfigMap for `helm install driftguard charts/driftguard`.
const DEFAULT_CONFIGMAP: &str = "driftguard-policy";

/// The policy in force and where it came from.
pub struct LoadedPolicy {
    /// The policy.
    pub policy: Policy,
    /// `ConfigMap driftguard/driftguard-policy` or `EMBEDDED`.
    pub origin: String,
}

/// The origin of the policy when no ConfigMap could be read.
const EMBEDDED: &str = "embedded default";

impl LoadedPolicy {
    /// Whether this is a copy read from the cluster, not the embedded
    /// default (which says nothing about the policy in force).
    pub fn from_cluster(&self) -> bool {
        self.origin != EMBEDDED
    }
}

impl PolicySource {
    /// The ConfigMap's policy; the embedded default, with a warning on
    /// stderr, when it cannot be read. A policy that does not load is an error.
    async fn load(&self, api: &Api) -> Result<LoadedPolicy, PluginError> {
        let label = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if self.namespace.is_empty() || !self.namespace.chars().all(label) {
            return Err(PluginError::Usage(format!(
                "--driftguard-namespace {:?}: not a namespace name",
                crate::text::quote(&self.namespace)
            )));
        }
        let (ns, name) = match &self.configmap {
            Some(text) => text.split_once('/').ok_or_else(|| {
                PluginError::Usage(format!(
                    "--policy-configmap {text}: expected NAMESPACE/NAME"
                ))
            })?,
            None => (self.namespace.as_str(), DEFAULT_CONFIGMAP),
        };
        let fallback = |why: String| {
            errln!(
                "warning: cannot read the policy from ConfigMap {ns}/{name} ({why}); using driftguard's embedded default policy, which may differ from the one in force (give --policy-configmap NAMESPACE/NAME)"
            );
            Ok(LoadedPolicy {
                policy: Policy::embedded(),
                origin: EMBEDDED.into(),
            })
        };
        let got = api.namespaced::<ConfigMap>(ns).get(name).await;
        let found = match api::answer(got, format_args!("get configmap {ns}/{name}"))? {
            Ok(cm) => Some(cm),
            Err(refusal) if refusal.code == 404 && self.configmap.is_none() => {
                match self.search(api).await? {
                    Some(cm) => Some(cm),
                    None => return fallback(refusal.message),
                }
            }
            Err(refusal) => return fallback(refusal.message),
        };
        let cm = found.unwrap_or_default();
        let (ns, name) = (
            cm.metadata.namespace.as_deref().unwrap_or(ns),
            cm.metadata.name.as_deref().unwrap_or(name),
        );
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(&self.key)) else {
            return fallback(format!("it has no key {}", self.key));
        };
        let origin = format!("ConfigMap {ns}/{name}");
        let (policy, notes) = policy_in(text, &format!("{origin} key {}", self.key))?;
        for note in notes {
            errln!("note: {note}");
        }
        Ok(LoadedPolicy { policy, origin })
    }

    /// The one ConfigMap in driftguard's namespace that the chart labelled
    /// and named `…-policy` and that has the key (a release with another
    /// name); `None` when there is none, more than one, or listing is not
    /// allowed.
    async fn search(&self, api: &Api) -> Result<Option<ConfigMap>, PluginError> {
        let params = kube::api::ListParams::default().labels("app.kubernetes.io/name=driftguard");
        let listed = api
            .namespaced::<ConfigMap>(&self.namespace)
            .list(&params)
            .await;
        let Ok(list) = api::answer(listed, "list configmaps")? else {
            return Ok(None);
        };
        let mut found: Vec<ConfigMap> = list
            .items
            .into_iter()
            .filter(|cm| {
                cm.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.ends_with("-policy"))
                    && cm.data.as_ref().is_some_and(|d| d.contains_key(&self.key))
            })
            .collect();
        Ok(if found.len() == 1 { found.pop() } else { None })
    }
}

/// The policy a ConfigMap key holds, read as the server reads its file
/// (`--policy` is that key, mounted): one parser, so the plugin never takes a
/// policy the server refuses, or the reverse.
fn policy_in(text: &str, origin: &str) -> Result<(Policy, Vec<String>), PluginError> {
    Policy::from_any_yaml(text, origin)
        .map_err(|e| PluginError::Usage(format!("the policy does not load: {e}")))
}

/// Characters a Kubernetes object name may hold (RBAC names allow `:` and `@`),
/// so that a name never changes the request's URL.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '@')
}

/// `KIND/NAME` split, both non-empty.
fn split_target(target: &str) -> Result<(&str, &str), PluginError> {
    match target.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
                return Err(PluginError::Usage(format!(
                    "{target}: {c:?} cannot be part of an object name"
                )));
            }
            Ok((kind, name))
        }
        _ => Err(PluginError::Usage(format!(
            "{target}: expected KIND/NAME, e.g. deployment/myapp"
        ))),
    }
}

/// Writes `value` as JSON or YAML.
fn print_structured(
    out: &mut Out,
    value: &impl serde::Serialize,
    output: Output,
) -> Result<(), PluginError> {
    out.document(structured(value, output)?.trim_end());
    Ok(())
}

/// `value` as JSON or YAML, holding nothing a terminal acts on but line
/// breaks. serde_json leaves DEL, C1 and bidi controls raw (escaped by
/// [`crate::text::printable_json`]), serde_saphyr bidi controls in plain
/// scalars: such a YAML document is written as JSON, which is YAML 1.2 too.
fn structured(value: &impl serde::Serialize, output: Output) -> Result<String, PluginError> {
    if output == Output::Yaml {
        let yaml = serde_saphyr::to_string(value)
            .map_err(|e| PluginError::Usage(format!("cannot write YAML: {e}")))?;
        let printable = |l: &str| matches!(crate::text::printable(l), Cow::Borrowed(_));
        if yaml.lines().all(printable) {
            return Ok(yaml);
        }
    }
    serde_json::to_string_pretty(value)
        .map(|json| crate::text::printable_json(&json).into_owned())
        .map_err(|e| PluginError::Usage(format!("cannot write JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_command_lines_are_well_formed_and_status_refuses_a_namespace() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        crate::cli::Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["kubectl-driftguard", "-n", "shop", "status"]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let refused = runtime.block_on(cli.dispatch()).unwrap_err().to_string();
        assert!(
            refused.contains("-n/--namespace does not apply"),
            "{refused}"
        );
    }

    /// The ConfigMap's policy is read by the server's parser: a `kind:`
    /// file is refused (the server refuses it too), an Application file is
    /// the server's embedded policy with its rules.
    #[test]
    fn the_configmaps_policy_is_read_as_the_server_reads_it() {
        let err = policy_in("kind: DriftguardPolicy\nmode: enforce\n", "cm")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kind `DriftguardPolicy` is not a driftguard policy"),
            "{err}"
        );
        let app =
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {}\n";
        let (policy, notes) = policy_in(app, "cm").unwrap();
        assert_eq!(policy.applications.len(), 1);
        assert!(notes[0].contains("embedded default policy"), "{notes:?}");
    }

    /// `-o json` read as JSON, `-o yaml` as YAML.
    fn read(text: &str, output: Output) -> serde_json::Value {
        match output {
            Output::Json => serde_json::from_str(text).unwrap(),
            _ => serde_saphyr::from_str(text).unwrap(),
        }
    }

    #[test]
    fn structured_output_escapes_terminal_controls() {
        let value = serde_json::json!({"reason": "INC\u{1b}[2K\rforged\u{9b}\nline"});
        for output in [Output::Yaml, Output::Json] {
            let text = structured(&value, output).unwrap();
            assert_eq!(read(&text, output), value, "{text}");
            assert!(
                !text.contains(['\u{1b}', '\r', '\u{9b}']) && text.trim_end().lines().count() <= 3,
                "{text:?}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever the strings, JSON and YAML come out holding nothing a
        /// terminal acts on, mean the same value, and pass through `Out`
        /// byte for byte.
        #[test]
        fn structured_output_is_printable_and_means_the_value(
            a in out::tests::hostile(),
            b in out::tests::hostile(),
        ) {
            let value = serde_json::json!({"reason": a, "list": [b, {"k": a}]});
            for output in [Output::Json, Output::Yaml] {
                let text = structured(&value, output).unwrap();
                proptest::prop_assert_eq!(read(&text, output), value.clone(), "{}", text);
                let mut o = Out::buffer();
                o.document(text.trim_end());
                proptest::prop_assert_eq!(o.written(), format!("{}\n", text.trim_end()));
                let lines = text.lines().map(crate::text::printable);
                proptest::prop_assert!(lines.clone().all(|l| matches!(l, Cow::Borrowed(_))), "{:?}", text);
            }
        }
    }

    #[test]
    fn targets_are_kind_slash_name() {
        assert_eq!(split_target("deploy/myapp").unwrap(), ("deploy", "myapp"));
        for bad in [
            "myapp",
            "/x",
            "deploy/",
            "a/b/c",
            "deploy/x?dryRun=All",
            "cm/a b",
        ] {
            assert!(split_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_command_line_parses() {
        Cli::try_parse_from([
            "kubectl-driftguard",
            "break-glass",
            "deploy/x",
            "-n",
            "prod",
            "--reason",
            "r",
            "--for",
            "1h",
        ])
        .unwrap();
        assert!(
            Cli::try_parse_from([
                "kubectl-driftguard",
                "break-glass",
                "deploy/x",
                "--end",
                "--for",
                "1h"
            ])
            .is_err()
        );
        assert!(Cli::try_parse_from(["kubectl-driftguard", "preview", "deploy/x"]).is_err());
        Cli::try_parse_from([
            "kubectl-driftguard",
            "explain",
            "deploy/x",
            "-o",
            "json",
            "--context",
            "c",
        ])
        .unwrap();
        // In a spoke, explain reads each tool where it runs.
        Cli::try_parse_from([
            "kubectl-driftguard",
            "explain",
            "deploy/x",
            "--argocd-kubeconfig",
            "hub.yaml",
            "--flux-kubeconfig",
            "hub.yaml",
            "--flux-context",
            "hub",
        ])
        .unwrap();
    }

    /// The type of the objects [`every_reader_of_a_break_glass_agrees_on_its_state`] reads.
    fn config_maps() -> api::Resource {
        api::Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        }
    }

    /// One break-glass state, five readers: the webhook, the sweeper,
    /// `explain` and `status` must all give the answer of
    /// [`crate::drift::breakglass_state::state`] for every state an object can be in.
    #[test]
    fn every_reader_of_a_break_glass_agrees_on_its_state() {
        use crate::drift::breakglass_state::{self, BreakGlass, EXPIRES, LABEL, PAUSED, REASON};
        use crate::drift::inputs::Inputs;
        use serde_json::{Value, json};

        let policy = Policy::from_yaml(
            "breakGlass: {allowedGroups: [sre-oncall], maxDuration: 4h}\n",
            "p.yaml",
        )
        .unwrap();
        let now = jiff::Timestamp::now();
        let at = |minutes: i64| {
            (now + jiff::SignedDuration::from_mins(minutes))
                .round(jiff::Unit::Second)
                .unwrap()
                .to_string()
        };
        let flux = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                          "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
        let object = |annotations: Value, labels: Value| {
            let mut labels_all = flux.clone();
            json_patch::merge(&mut labels_all, &labels);
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings", "namespace": "production",
                                "labels": labels_all, "annotations": annotations}})
        };
        // What `kubectl driftguard break-glass` writes, with the given reason
        // and expiry (null: taken off).
        let armed = |reason: Value, expires: Value| {
            let plan = crate::breakglass::pause::plan(
                &object(json!({}), json!({})),
                "",
                &policy,
                "argocd",
            );
            let mut o = object(json!({}), json!({}));
            json_patch::merge(
                &mut o,
                &crate::breakglass::pause::arm_patch(&plan, "x", "x", "1"),
            );
            json_patch::merge(
                &mut o,
                &json!({"metadata": {"annotations": {REASON: reason, EXPIRES: expires}}}),
            );
            assert!(o["metadata"]["annotations"][PAUSED].is_string(), "{o}");
            assert_eq!(o["metadata"]["labels"][LABEL], "true");
            o
        };
        let cases = [
            ("none", object(json!({}), json!({}))),
            ("none", object(json!({}), json!({LABEL: "true"}))),
            ("active", armed(json!("INC-1"), json!(at(60)))),
            ("expired", armed(json!("INC-1"), json!(at(-1)))),
            ("invalid", armed(json!(" "), json!(at(60)))),
            ("invalid", armed(json!("INC-1"), json!("tomorrow"))),
            ("invalid", armed(json!("INC-1"), json!(at(5 * 60)))),
            ("invalid", armed(json!("INC-1"), Value::Null)),
            ("ended", armed(Value::Null, Value::Null)),
        ];
        let resource = config_maps();
        let me = api::Identity {
            username: "oncall".into(),
            groups: vec!["sre-oncall".into()],
        };
        for (want, o) in cases {
            let inputs = Inputs::read(&o, &policy);
            let state = breakglass_state::state(&inputs, &policy, now);
            assert_eq!(state.name(), want, "{o}");

            // The webhook, for an authorized writer leaving them as they are.
            let webhook =
                breakglass_state::evaluate(&inputs, None, "oncall", &me.groups, &policy, now);
            match (&webhook, want) {
                (BreakGlass::Valid { .. }, "active") => {}
                (BreakGlass::None, "none" | "ended") => {}
                (BreakGlass::Invalid { why, .. }, "expired" | "invalid") => {
                    assert_eq!(Some(why.clone()), state.why_not(), "{o}")
                }
                _ => panic!("webhook {webhook:?} for a {want} break-glass: {o}"),
            }
            // The sweeper: leaves what driftguard did not arm, keeps what grants, ends the rest.
            let swept = crate::breakglass::sweeper::sweep(&o, "", &policy, now);
            match (swept, want) {
                (Err(_), "none") | (Ok(false), "active") => {}
                (Ok(true), "expired" | "invalid" | "ended") => {}
                (swept, _) => panic!("sweeper {swept:?} for a {want} break-glass: {o}"),
            }
            // explain and status.
            let explained = explain::break_glass_report(&policy, &me, &inputs);
            let meta = serde_json::from_value(o["metadata"].clone()).unwrap();
            let listed = status::break_glass_entry(&resource, &meta, &policy, now);
            let explained = serde_json::to_value(&explained).unwrap();
            if want == "none" {
                assert!(explained["onObject"].is_null(), "{explained}");
                assert!(listed.is_none(), "{listed:?}");
                continue;
            }
            let (listed_state, entry) = listed.expect("status lists it");
            let entry = serde_json::to_value(&entry).unwrap();
            assert_eq!(listed_state, state, "{o}");
            for report in [&explained["onObject"], &entry] {
                assert_eq!(report["state"], want, "{report}");
                assert_eq!(report["why"], json!(state.why_not()), "{report}");
            }
        }
    }
}
