//! The command line: `check` and `policy lint` (the server comes next).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jiff::Timestamp;
use serde_json::Value;

use crate::policy::{Policy, argocd, lint};
use crate::{Endpoint, judge};

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
    Check(CheckArgs),
    /// Work with policy files.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Debug, clap::Args)]
struct PolicySource {
    /// Policy file (YAML). Without it, the embedded default policy applies.
    #[arg(long, env = "DRIFTGUARD_POLICY")]
    policy: Option<PathBuf>,
    /// Argo CD Application manifest(s) whose spec.ignoreDifferences apply to the objects they track.
    #[arg(
        long = "argocd-application",
        env = "DRIFTGUARD_ARGOCD_APPLICATION",
        value_delimiter = ','
    )]
    argocd_applications: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    source: PolicySource,
    /// The parent object (JSON or YAML) of a `…/scale` review, as the server would fetch it.
    #[arg(long)]
    parent: Option<PathBuf>,
    /// Answer as the mutating webhook (/mutate) instead of the validating one.
    #[arg(long)]
    mutate: bool,
    /// Judge as of this RFC 3339 time instead of now (break-glass expiry, drift annotation).
    #[arg(long, hide = true)]
    now: Option<Timestamp>,
    /// AdmissionReview JSON file, or `-` for standard input.
    review: PathBuf,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Load policy files and Argo CD Applications, and flag jq expressions that are not path expressions.
    Lint {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// A failure with a one-line message, reported on stderr with exit code 2.
struct Failure(String);

impl Cli {
    pub fn run(self) -> ExitCode {
        let result = match self.command {
            Command::Check(args) => check(args),
            Command::Policy {
                command: PolicyCommand::Lint { files },
            } => Ok(lint_files(&files)),
        };
        result.unwrap_or_else(|Failure(msg)| {
            eprintln!("driftguard: {msg}");
            ExitCode::from(2)
        })
    }
}

impl PolicySource {
    fn load(&self) -> Result<Policy, Failure> {
        let policy = match &self.policy {
            Some(path) => {
                let (policy, notes) =
                    Policy::from_any_yaml(&read_text(path)?, &path.display().to_string())
                        .map_err(|e| Failure(e.to_string()))?;
                for note in notes {
                    eprintln!("driftguard: {note}");
                }
                policy
            }
            None => Policy::embedded(),
        };
        let mut apps = Vec::new();
        for path in &self.argocd_applications {
            let text = read_text(path)?;
            let imported = argocd::parse(&text, &path.display().to_string()).map_err(Failure)?;
            for note in imported.skipped {
                eprintln!("driftguard: {note}");
            }
            apps.extend(imported.applications);
        }
        Ok(policy.with_applications(apps))
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

fn check(args: CheckArgs) -> Result<ExitCode, Failure> {
    let policy = args.source.load()?;
    let body = read_input(&args.review)?;
    let parent = match &args.parent {
        Some(path) => {
            let text = read_text(path)?;
            let value: Value = serde_saphyr::from_str(&text).map_err(|e| {
                Failure(format!(
                    "{}: not a JSON or YAML object: {e}",
                    path.display()
                ))
            })?;
            Some(value)
        }
        None => None,
    };
    let endpoint = if args.mutate {
        Endpoint::Mutate
    } else {
        Endpoint::Validate
    };
    let now = args.now.unwrap_or_else(Timestamp::now);
    let judged = judge(&policy, &body, endpoint, parent.as_ref(), now)
        .map_err(|e| Failure(format!("{}: {e}", args.review.display())))?;
    let mut out = judged.to_json();
    out.push(b'\n');
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)
        .map_err(|e| Failure(format!("stdout: cannot write: {e}")))?;
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
