#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    driftguard::cli::Cli::parse().run()
}
