//! The `logbook` command line.
#![forbid(unsafe_code)]

fn main() {
    println!("logbook {}", env!("CARGO_PKG_VERSION"));
}
