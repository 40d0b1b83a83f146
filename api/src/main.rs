//! The `logbook` command line: the Host API for people, and `logbook serve` for programs.
#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

use clap::Parser;
use logbook_api::ErrorCode;

/// The exit status of a failure of kind `code` (0 is success; 2 is also a usage error found by
/// the argument parser; 1 is any other failure, such as a kind added later).
fn exit_status(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::InvalidArgument => 2,
        ErrorCode::NotFound => 3,
        ErrorCode::Conflict => 4,
        ErrorCode::Busy => 5,
        ErrorCode::Unsupported => 6,
        ErrorCode::UnsupportedFormat => 7,
        ErrorCode::PermissionDenied => 8,
        ErrorCode::Corrupt => 9,
        ErrorCode::Io => 10,
        _ => 1,
    }
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let args = cli::Args::parse();
    // Room for the open-Session cache (see `logbook_engine::raise_descriptor_limit`).
    logbook_engine::raise_descriptor_limit();
    let json = args.json();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if json {
                let body = serde_json::to_string(&logbook_api::wire::WireError::from(&err))
                    .expect("an error of two strings always encodes");
                eprintln!("{{\"error\":{body}}}");
            } else {
                eprintln!("logbook: {err}");
            }
            ExitCode::from(exit_status(err.code))
        }
    }
}

/// A reader that closes the pipe early (`logbook history s --all | head -1`) ends the command
/// quietly with status 0, as Unix tools do, instead of a panic from `println!` on EPIPE.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
