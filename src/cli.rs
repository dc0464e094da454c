//! The command line: `check`, `serve`, `certs`, `register`, `report`, `probe` and `policy lint`.
//! `serve`'s flags are [`server::Config`] itself.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::args::PolicySource;
use crate::policy::{Policy, lint};
use crate::server;

mod check;
mod probe;
use check::{CheckArgs, check};
use probe::{ProbeArgs, probe};

/// The `driftguard` command line, parsed.
#[derive(Debug, Parser)]
#[command(
    name = "driftguard",
    version,
    about = "Stop manual drift on GitOps-managed Kubernetes objects at admission"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Judge an AdmissionReview offline and print the response the webhook would send.
    #[command(
        mut_arg("decision_timeout", |a| a.help(
            "Longest the decision may take before `check` gives up (exit 2)"
        )),
        after_help = "Exit status: 0 allowed, 1 denied, 2 the review or policy could not be read.\n\
            stdout is the response (-o json, yaml) or the verdict (-o text); otherwise stderr says \
            allowed or denied, and why.\n\n\
            Examples:\n  \
            driftguard check review.json\n  \
            driftguard check --old live.yaml --new edited.yaml --user alice -o text\n  \
            driftguard check --policy policy.yaml --argocd-application app.yaml review.json\n  \
            kubectl get --raw ... | driftguard check -"
    )]
    Check(CheckArgs),
    /// Serve the admission webhook over HTTPS (POST /validate, POST /mutate) and probes over HTTP.
    // Boxed: the serve flags dwarf every other subcommand's.
    #[command(after_help = "Examples:\n  \
        driftguard serve --self-signed                   # try it: embedded policy, no TLS files\n  \
        driftguard serve --tls-cert tls.crt --tls-key tls.key --policy policy.yaml --watch-argocd\n  \
        driftguard serve --self-signed --no-cluster --policy policy.yaml\n\n\
        Every flag can be set through its DRIFTGUARD_* variable. Reference: docs/cli.md")]
    Serve(Box<server::Config>),
    /// Write a development CA and serving certificate: ca.crt, tls.crt, tls.key.
    Certs(CertsArgs),
    /// Create or update both webhook configurations (server-side apply), or print them with --dry-run.
    Register(RegisterArgs),
    /// Summarize audit records (kubectl logs of a trial in audit or warn mode): what enforce
    /// would deny, by object, user and path, with ignore rules for the frequent paths.
    #[command(after_help = "Example:\n  \
        kubectl -n driftguard logs deploy/driftguard --since=168h | driftguard report -")]
    Report {
        /// Audit records, one JSON line each (other lines are counted and skipped), or `-`.
        records: PathBuf,
        /// Rows per table.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
    /// Ask a running webhook to judge a harmless write, verifying its certificate: `helm test`.
    #[command(
        after_help = "Exit status: 0 it answered and allowed it, 2 anything else (said on stderr).\n\n\
        Example:\n  \
        driftguard probe --url https://driftguard.driftguard.svc:443 --ca-file ca.crt"
    )]
    Probe(ProbeArgs),
    /// Work with policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Debug, clap::Args)]
struct RegisterArgs {
    /// The driftguard Service: NAME.NAMESPACE[:PORT] (port defaults to 443).
    #[arg(
        long,
        env = "DRIFTGUARD_SERVICE",
        required_unless_present_any = ["url", "check"],
        conflicts_with = "url"
    )]
    service: Option<String>,
    /// Or a URL such as https://127.0.0.1:8443 (out of cluster); /validate and /mutate are appended.
    #[arg(long, env = "DRIFTGUARD_URL")]
    url: Option<String>,
    /// PEM of the CA that signed driftguard's serving certificate.
    #[arg(long, env = "DRIFTGUARD_CA_BUNDLE", required_unless_present = "check")]
    ca_bundle: Option<PathBuf>,
    /// Fail (no unchecked writes while driftguard is down) or Ignore.
    #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    failure_policy: String,
    /// Seconds the apiserver waits for an answer (1 to 30).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(i32).range(1..=30))]
    timeout: i32,
    /// Namespaces never sent to driftguard, besides kube-system and driftguard's own.
    #[arg(long = "exclude-namespace")]
    exclude_namespaces: Vec<String>,
    /// Name of both configurations.
    #[arg(long, default_value = "driftguard")]
    name: String,
    /// Policy whose controller and trusted identities the matchConditions skip.
    #[command(flatten)]
    source: PolicySource,
    /// Kubeconfig to write with; default: in-cluster or $KUBECONFIG.
    #[arg(long, env = "DRIFTGUARD_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Print the YAML instead of applying it.
    #[arg(long)]
    dry_run: bool,
    /// Compare the registered webhooks (`--name`, or those in `--from`) with
    /// what the policy needs; exit 1 when they differ. Writes nothing.
    #[arg(long, conflicts_with = "dry_run")]
    check: bool,
    /// With `--check`: a YAML file (`-`: stdin) holding both configurations,
    /// e.g. `helm template`'s output, instead of the cluster's.
    #[arg(long, requires = "check")]
    from: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key (mode 0600) into.
    #[arg(long)]
    out: PathBuf,
    /// DNS names for the serving certificate, e.g. driftguard.driftguard.svc.
    #[arg(long = "dns")]
    dns: Vec<String>,
    /// IP addresses for the serving certificate.
    #[arg(long = "ip")]
    ip: Vec<std::net::IpAddr>,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Load policy files and Argo CD Applications, and flag jq expressions that are not path expressions.
    Lint {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of a policy file (the chart's values.schema.json `policy`).
    Schema,
}

/// A failure with a one-line message, reported on stderr with exit code 2.
struct Failure(String);

impl Cli {
    /// Runs the command and returns its exit status; a failure is printed on
    /// stderr, with status 2.
    pub fn run(self) -> ExitCode {
        let result = match self.command {
            Command::Check(args) => check(args),
            Command::Serve(args) => serve(*args),
            Command::Certs(args) => certs(args),
            Command::Register(args) => register(args),
            Command::Probe(args) => probe(args),
            Command::Report { records, top } => report(&records, top),
            Command::Policy {
                command: PolicyCommand::Lint { files },
            } => Ok(lint_files(&files)),
            Command::Policy {
                command: PolicyCommand::Schema,
            } => {
                println!("{:#}", crate::policy::json_schema());
                Ok(ExitCode::SUCCESS)
            }
        };
        result.unwrap_or_else(|Failure(msg)| {
            eprintln!("driftguard: {msg}");
            ExitCode::from(2)
        })
    }
}

impl PolicySource {
    fn load(&self) -> Result<Policy, Failure> {
        let (policy, notes) =
            crate::policy::load_sources(self.policy.as_deref(), &self.argocd_applications)
                .map_err(|e| Failure(e.to_string()))?;
        for note in notes {
            eprintln!("driftguard: {note}");
        }
        Ok(policy)
    }
}

fn read_text(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure(format!("{}: cannot read: {e}", path.display())))
}

fn read_input(path: &Path) -> Result<Vec<u8>, Failure> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure(format!("stdin: cannot read: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| Failure(format!("{}: cannot read: {e}", path.display())))
}

fn report(records: &Path, top: usize) -> Result<ExitCode, Failure> {
    let read = |e: std::io::Error| Failure(format!("{}: cannot read: {e}", records.display()));
    let report = if records.as_os_str() == "-" {
        crate::audit::report::Report::read(std::io::stdin().lock()).map_err(read)?
    } else {
        let file = std::fs::File::open(records).map_err(read)?;
        crate::audit::report::Report::read(std::io::BufReader::new(file)).map_err(read)?
    };
    print!("{}", report.render(top));
    Ok(ExitCode::SUCCESS)
}

fn serve(config: server::Config) -> Result<ExitCode, Failure> {
    if config.check_config {
        let said = server::check_config(&config).map_err(|e| Failure(format!("{e:#}")))?;
        println!("{said}");
        return Ok(ExitCode::SUCCESS);
    }
    crate::logging::init(config.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the runtime: {e}")))?;
    let served = runtime.block_on(server::run(config));
    // The records of the last reviews, unless nobody reads stdout.
    if !crate::logging::audit_writer::flush(std::time::Duration::from_secs(5)) {
        eprintln!("driftguard: audit records still queued at exit were lost");
    }
    served.map_err(|e| Failure(format!("{e:#}")))?;
    Ok(ExitCode::SUCCESS)
}

fn register(args: RegisterArgs) -> Result<ExitCode, Failure> {
    // Where the apiserver reaches the webhook; not the crate's `Endpoint`
    // (which webhook answers), hence qualified.
    use crate::cluster::register;
    let policy = args.source.load()?;
    if args.check {
        return check_registration(&args, &policy);
    }
    let endpoint = match (&args.service, &args.url) {
        (Some(service), _) => {
            register::WebhookAddress::parse_service(service).map_err(|e| Failure(e.to_string()))?
        }
        (None, Some(url)) if url.starts_with("https://") => {
            register::WebhookAddress::Url(url.clone())
        }
        (None, Some(url)) => {
            return Err(Failure(format!(
                "--url {url}: the apiserver calls webhooks over https only"
            )));
        }
        (None, None) => return Err(Failure("give --service or --url".into())),
    };
    let ca_path = args
        .ca_bundle
        .as_deref()
        .unwrap_or(std::path::Path::new(""));
    let ca_bundle = std::fs::read(ca_path)
        .map_err(|e| Failure(format!("{}: cannot read: {e}", ca_path.display())))?;
    let options = register::Options {
        name: args.name,
        endpoint,
        ca_bundle,
        failure_policy: args.failure_policy,
        timeout_seconds: args.timeout,
        exclude_namespaces: args.exclude_namespaces,
    };
    for pattern in crate::cluster::rules::conditions(&policy).left_out {
        eprintln!(
            "driftguard: identity pattern `{pattern}` cannot be expressed in CEL; driftguard still allows it, after a call"
        );
    }
    let (validating, mutating) = register::configurations(&options, &policy);
    if args.dry_run {
        print!("{}", register::to_yaml(&validating, &mutating));
        return Ok(ExitCode::SUCCESS);
    }
    with_cluster(args.kubeconfig.as_deref(), async |client| {
        register::apply(client, &validating, &mutating)
            .await
            .map_err(|e| Failure(format!("server-side apply failed: {e}")))
    })?;
    println!(
        "applied ValidatingWebhookConfiguration and MutatingWebhookConfiguration {} (field manager driftguard)",
        options.name
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `work` with a client of the cluster `kubeconfig` names (default:
/// in-cluster or $KUBECONFIG), on a runtime of its own.
fn with_cluster<T>(
    kubeconfig: Option<&Path>,
    work: impl AsyncFnOnce(kube::Client) -> Result<T, Failure>,
) -> Result<T, Failure> {
    crate::server::tls::install_process_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        let client = crate::cluster::client(kubeconfig)
            .await
            .map_err(|e| Failure(e.to_string()))?;
        work(client).await
    })
}

/// `register --check`: the registration against what `policy` needs.
fn check_registration(args: &RegisterArgs, policy: &Policy) -> Result<ExitCode, Failure> {
    use crate::registration;
    let (validating, mutating) = match &args.from {
        Some(path) => {
            registration::read_rendered(&String::from_utf8_lossy(&read_input(path)?), &args.name)
                .map_err(|e| Failure(format!("{}: {e}", path.display())))?
        }
        None => with_cluster(args.kubeconfig.as_deref(), async |client| {
            crate::cluster::register::read(client, &args.name)
                .await
                .map_err(|e| Failure(format!("cannot read the webhooks {}: {e}", args.name)))
        })?,
    };
    let differences = registration::check(policy, None, validating.as_ref(), mutating.as_ref());
    if differences.is_empty() {
        println!(
            "the webhooks {} send driftguard exactly what the policy {} judges",
            args.name, policy.source
        );
        return Ok(ExitCode::SUCCESS);
    }
    for line in registration::lines(&differences) {
        println!("{line}");
    }
    println!("fix: {}", registration::FIX);
    Ok(ExitCode::from(1))
}

fn certs(args: CertsArgs) -> Result<ExitCode, Failure> {
    let mut names = args.dns;
    names.extend(args.ip.iter().map(ToString::to_string));
    if names.is_empty() {
        names = vec!["localhost".into(), "127.0.0.1".into()];
    }
    let generated = crate::certs::generate(&names[0], &names)
        .map_err(|e| Failure(format!("cannot generate: {e}")))?;
    crate::certs::write(&args.out, &generated)
        .map_err(|e| Failure(format!("{}: cannot write: {e}", args.out.display())))?;
    println!(
        "wrote {0}/ca.crt, {0}/tls.crt and {0}/tls.key for {1}",
        args.out.display(),
        names.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn lint_files(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in files {
        let report = match std::fs::read_to_string(path) {
            Ok(text) => lint::lint(&text, &path.display().to_string()),
            Err(e) => lint::Report {
                problems: vec![format!("{}: cannot read: {e}", path.display())],
                ..Default::default()
            },
        };
        for note in &report.notes {
            println!("ok: {note}");
        }
        for problem in &report.problems {
            println!("problem: {problem}");
        }
        failed |= !report.problems.is_empty();
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
