//! `kubectl-driftguard`: the kubectl plugin (`kubectl driftguard ...`).
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    driftguard::plugin::Cli::parse().run()
}
