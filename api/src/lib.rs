//! `logbook-api`: the synchronous Host API, its wire types, and what the
//! `logbook` binary builds on.
//!
//! [`Host`] opens a Root (the engine's storage) and answers every operation of
//! the contract: storage operations through [`Host::root`], workspace reads and
//! git views through the Host's own methods. [`dispatch::call`] maps a method
//! name and JSON parameters onto those calls; [`serve::serve`] runs the
//! JSON-lines server on top of it. The layers below hold all storage logic:
//! this crate only composes and converts.
//!
//! ```no_run
//! use logbook_api::Host;
//! use serde_json::value::RawValue;
//!
//! let host = Host::open_or_init(std::path::Path::new(".logbook")).unwrap();
//! let params = RawValue::from_string(r#"{"operation":"op-1","sessionId":"s1","workspace":null}"#.into()).unwrap();
//! let answer = logbook_api::dispatch::call(&host, "createSession", Some(&params), &mut |_| {}).unwrap();
//! println!("{}", answer.get());
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod demo;
pub mod dispatch;
mod error;
pub mod host;
pub mod import;
pub mod mcp;
pub mod serve;
pub mod time;
pub mod wire;

pub use error::{ApiError, ErrorCode};
pub use host::Host;

/// The default Root: `--root`, else `$LOGBOOK_ROOT`, else `.logbook` in the current directory.
pub fn default_root(flag: Option<std::path::PathBuf>) -> std::path::PathBuf {
    flag.or_else(|| std::env::var_os("LOGBOOK_ROOT").map(Into::into))
        .unwrap_or_else(|| std::path::PathBuf::from(".logbook"))
}
