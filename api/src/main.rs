//! The `logbook` command line: the Host API for people, and `logbook serve` for programs.
#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("logbook: {err}");
            ExitCode::from(match err.code {
                logbook_api::ErrorCode::InvalidArgument => 2,
                logbook_api::ErrorCode::Busy => 3,
                _ => 1,
            })
        }
    }
}
