//! Subcommands of `logbook`. Each one builds the wire parameters, calls the
//! same dispatcher the server uses, and prints the answer for a person (or,
//! with `--json`, exactly as the wire has it).

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use logbook_api::{dispatch, ApiError, ErrorCode, Host};

mod progress;
mod show;

#[derive(Parser, Debug)]
#[command(
    name = "logbook",
    version,
    about = "Durable, searchable history for agent sessions",
    after_help = "Exit status: 0 success; 2 invalid_argument or a usage error; 3 not_found; \
                  4 conflict; 5 busy; 6 unsupported; 7 unsupported_format; 8 permission_denied; \
                  9 corrupt (also verify finding damage); 10 io. With --json, errors are \
                  {\"error\": {\"code\", \"message\"}} on standard error."
)]
pub struct Args {
    /// The Root directory (default: $LOGBOOK_ROOT, else `.logbook` in the current directory).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// Print answers exactly as the wire has them (JSON).
    #[arg(long, global = true)]
    json: bool,
    /// Open the Root as a reader beside the process that writes it (a running host or
    /// `logbook serve`): no lock is taken and nothing is written, appends show up within
    /// 100 ms, and commands that would change the Root fail with permission_denied.
    #[arg(long, global = true)]
    read_only: bool,
    #[command(subcommand)]
    command: Command,
}

/// The long help of `logbook mcp`.
const MCP_ABOUT: &str = "Serve the Model Context Protocol (MCP) on standard input and output, \
so coding agents and other MCP clients can read the history kept in this Root.

Tools: list_sessions (newest activity first, with titles), search_sessions (literal text over \
every Session, with snippets), read_history (pages of one Session, newest first by default) and \
read_source (one whole field). Nothing is ever written: the Root must exist.

Claude Code:  claude mcp add logbook -- logbook mcp --root ~/.logbook
Codex (~/.codex/config.toml):
  [mcp_servers.logbook]
  command = \"logbook\"
  args = [\"mcp\", \"--root\", \"/home/me/.logbook\"]";

/// The long help of `logbook replicate`.
#[cfg(feature = "replica")]
const REPLICATE_ABOUT: &str = "Copy this Root continuously to an S3-compatible bucket, beside \
the process that writes it (no lock is taken and nothing in the Root is written).

Each round (at most one a second while something changed, none while idle) uploads new blobs, \
patches and sealed segment files once, the tail of every changed log as a chunk of whole \
batches, then a manifest naming the objects of a consistent Root at that moment. Killing it is \
safe: the next run reads the newest manifest and goes on without uploading anything twice. A \
failing store is retried with backoff. Nothing is ever deleted from the bucket.

Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (or AWS_DEFAULT_REGION), \
optionally AWS_SESSION_TOKEN; --endpoint or AWS_ENDPOINT_URL for S3-compatible servers.

  logbook replicate --to s3://my-bucket/laptop --endpoint http://127.0.0.1:9000
  logbook restore --from s3://my-bucket/laptop --root /tmp/copy --at 2h";

#[derive(Subcommand, Debug)]
enum Command {
    /// Make a new Root (the directory must be absent or empty).
    Init,
    /// List the Sessions of the Root, newest activity first: title, last activity, size.
    Sessions {
        /// Show at most this many (all when absent).
        #[arg(long)]
        limit: Option<u64>,
        /// Only the Sessions of this workspace directory.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// By id instead of newest activity first.
        #[arg(long)]
        by_id: bool,
    },
    /// Give a Session a title (shown by `sessions`).
    Title {
        /// The Session id.
        session: String,
        /// The title (at most 1,024 bytes).
        title: String,
        /// The operation id that makes a repeat harmless (a fresh one when absent).
        #[arg(long)]
        operation: Option<String>,
    },
    /// Start a Session.
    New {
        /// The Session id (generated when absent).
        #[arg(long)]
        id: Option<String>,
        /// The Session's workspace directory (absolute, fixed for its life).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// The operation id that makes a repeat harmless (a fresh one when absent).
        #[arg(long)]
        operation: Option<String>,
    },
    /// Send a user message to a Session (starts a Turn; prints its invocation id).
    Send {
        /// The Session id.
        session: String,
        /// The message text.
        text: String,
        /// The operation id that makes a repeat harmless (a fresh one when absent).
        #[arg(long)]
        operation: Option<String>,
    },
    /// Append events, one JSON object per line, from a file or `-` for standard input.
    Append {
        /// The Session id.
        session: String,
        /// The events file (`-`: standard input).
        #[arg(default_value = "-")]
        file: PathBuf,
        /// The operation; defaults to one derived from the events, so a repeat is harmless.
        #[arg(long)]
        operation: Option<String>,
    },
    /// Show history rows (forward from the start, or newest first with --backward).
    History {
        /// The Session id.
        session: String,
        /// Read as of this revision (the Session's current one when absent).
        #[arg(long)]
        through: Option<u64>,
        /// Show at most this many rows (in pages of at most 1,024).
        #[arg(long, default_value_t = 128)]
        limit: u32,
        /// Newest first.
        #[arg(long)]
        backward: bool,
        /// Follow the pages to the end.
        #[arg(long)]
        all: bool,
    },
    /// Search a Session's history for a literal text (SESSION QUERY), or every Session of
    /// the Root (--all QUERY), newest first.
    Search {
        /// SESSION QUERY: the Session id and the literal text to find; with --all, QUERY alone.
        #[arg(required = true, num_args = 1..=2, value_names = ["SESSION", "QUERY"])]
        words: Vec<String>,
        /// Search every Session of the Root (newest activity first), not one.
        #[arg(long)]
        all: bool,
        /// With --all: only Sessions of this workspace (the exact path they were made with).
        #[arg(long, requires = "all")]
        workspace: Option<String>,
        /// With --all: only Sessions active since this time: RFC 3339 (2026-12-05T07:40:00Z)
        /// or a span back from now (30m, 12h, 7d, 2w).
        #[arg(long, requires = "all")]
        since: Option<String>,
        /// Match case exactly (default: Unicode simple case folding).
        #[arg(long, conflicts_with = "ignore_case")]
        case_sensitive: bool,
        /// Fold case (Unicode simple case folding): the default, said explicitly.
        #[arg(long)]
        ignore_case: bool,
        /// Only matches that are whole words.
        #[arg(long)]
        whole_word: bool,
        /// Search as of this revision (the Session's current one when absent).
        #[arg(long)]
        through: Option<u64>,
        /// Stop after this many hits.
        #[arg(long, default_value_t = 100)]
        max_hits: usize,
    },
    /// Print one whole field of a row.
    Source {
        /// The Session id.
        session: String,
        /// The row's event sequence.
        sequence: u64,
        /// The row's index inside its event.
        #[arg(default_value_t = 0)]
        item: u32,
        /// The field: body, thinking, arguments, name, ...
        #[arg(long, default_value = "body")]
        field: String,
    },
    /// Fork a Session from a settled Turn, or from all of it.
    Fork {
        /// The Session id.
        session: String,
        /// The invocation of the Turn to fork at (all history when absent).
        #[arg(long)]
        turn: Option<String>,
        /// The operation id; defaults to one derived from the fork's source, fence and Turn, so a
        /// repeat is harmless.
        #[arg(long)]
        operation: Option<String>,
    },
    /// Show a Session's diagnostics, newest first.
    Diagnostics {
        /// The Session id.
        session: String,
    },
    /// Show the latest prepared model request of a Session.
    Context {
        /// The Session id.
        session: String,
    },
    /// List a directory of a Session's workspace.
    Ls {
        /// The Session id.
        session: String,
        /// The directory, relative to the workspace (its root when absent).
        #[arg(default_value = "")]
        path: String,
    },
    /// Print a file of a Session's workspace.
    Cat {
        /// The Session id.
        session: String,
        /// The file, relative to the workspace.
        path: String,
    },
    /// Git views of a Session's workspace.
    Git {
        #[command(subcommand)]
        command: GitCommand,
    },
    /// Capture the workspace change against HEAD as a stored patch and print it.
    Patch {
        /// The Session id.
        session: String,
        /// The operation id that makes a repeat harmless (a fresh one when absent).
        #[arg(long)]
        operation: Option<String>,
    },
    /// Walk every checksum of the Root.
    Verify,
    /// Serve the JSON-lines protocol on standard input and output.
    #[command(long_about = logbook_api::dispatch::serve_help())]
    Serve,
    /// Serve the Model Context Protocol on standard input and output, for coding agents to
    /// read their history (read-only).
    #[command(long_about = MCP_ABOUT)]
    Mcp,
    /// Write a Session as a bundle: one file that carries it whole to another Root
    /// (`logbook import FILE` there brings it back).
    Export {
        /// The Session id.
        session: String,
        /// The file to write (made new; an existing file is refused). Standard output when
        /// absent, unless that is a terminal.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// The fence: events 1 to THROUGH (the current revision when absent).
        #[arg(long)]
        through: Option<u64>,
    },
    /// Copy this Root continuously to an S3-compatible bucket: sealed segments, blobs and
    /// patches once, the growing tails every second, and a manifest per round. Runs beside
    /// the writer until stopped (killing it is safe: the next run resumes).
    #[cfg(feature = "replica")]
    #[command(long_about = REPLICATE_ABOUT)]
    Replicate {
        /// Where the replica lives (one prefix per Root).
        #[arg(long, value_name = "s3://BUCKET/PREFIX")]
        to: String,
        /// An S3-compatible endpoint, path-style (default: $AWS_ENDPOINT_URL, else AWS);
        /// plain http only on loopback.
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// Upload what is new once (one round and its manifest), then exit.
        #[arg(long)]
        once: bool,
    },
    /// Build a new Root (--root, an absent or empty directory) from a replica: the newest
    /// manifest, or the last one at or before --at. Every object is checked, then the Root
    /// is opened and verified.
    #[cfg(feature = "replica")]
    Restore {
        /// Where the replica lives.
        #[arg(long, value_name = "s3://BUCKET/PREFIX")]
        from: String,
        /// An S3-compatible endpoint, path-style (default: $AWS_ENDPOINT_URL, else AWS).
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// Restore the Root as of the last manifest at or before TIME: RFC 3339
        /// (2026-12-05T07:40:00Z), milliseconds since the Unix epoch, or a span back from now
        /// (30s, 15m, 2h, 1d).
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
    },
    /// Import agent transcripts (Claude Code and Codex JSONL) or Logbook bundles; again to
    /// bring in what the transcripts gained since. With no path, the agents' default places
    /// ($CLAUDE_CONFIG_DIR/projects or ~/.claude/projects, $CODEX_HOME/sessions or
    /// ~/.codex/sessions).
    Import {
        /// Files, or folders to walk (symbolic links are never followed).
        files: Vec<PathBuf>,
        /// The workspace to give the imported Sessions.
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// The tour: write a real session, read it back, search it, look at this directory.
    Demo,
    /// Print a shell completion script (install: `logbook completions bash >
    /// ~/.local/share/bash-completion/completions/logbook`, or your shell's place).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page in roff (install: `logbook man > ~/.local/share/man/man1/logbook.1`).
    Man,
}

#[derive(Subcommand, Debug)]
enum GitCommand {
    /// Staged, worktree and untracked changes.
    Status {
        /// The Session id.
        session: String,
    },
    /// The diff of one path in one area (staged, worktree or untracked).
    Diff {
        /// The Session id.
        session: String,
        /// The path, relative to the workspace.
        path: String,
        /// Which change to show.
        #[arg(long, default_value = "worktree", value_parser = ["staged", "worktree", "untracked"])]
        area: String,
    },
}

impl Args {
    /// Whether answers (and errors) are printed as JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

pub struct Ctx {
    pub host: Host,
    pub json: bool,
}

impl Ctx {
    pub fn call(&self, method: &str, params: Value) -> Result<Value, ApiError> {
        dispatch::call_value(&self.host, method, &params)
    }

    fn print(&self, value: &Value, human: impl FnOnce(&Value)) {
        if self.json {
            println!("{value}");
        } else {
            human(value);
        }
    }
}

pub fn run(args: Args) -> Result<(), ApiError> {
    #[cfg(feature = "replica")]
    let explicit_root = args.root.clone();
    let root = logbook_api::default_root(args.root);
    if args.read_only && matches!(args.command, Command::Init | Command::Demo) {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "--read-only opens an existing Root to read it; init and demo write one",
        ));
    }
    #[cfg(feature = "replica")]
    if args.read_only && matches!(args.command, Command::Restore { .. }) {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "--read-only opens an existing Root to read it; restore builds a new one",
        ));
    }
    match args.command {
        Command::Init => {
            logbook_engine::Root::init(&root)?;
            println!("initialised an empty Root at {}", root.display());
            Ok(())
        }
        Command::Serve => {
            // Notices (a torn tail cut on open) go to standard error; the wire stays clean.
            let options = logbook_engine::RootOptions {
                progress: logbook_engine::ProgressSink::new(Arc::new(progress::Notices)),
                read_only: args.read_only,
                ..logbook_engine::RootOptions::default()
            };
            let opened = if args.read_only {
                existing_root(&root)?;
                logbook_engine::Root::open_with(&root, options)
            } else {
                logbook_engine::Root::open_or_init_with(&root, options)
            };
            let host = Arc::new(Host::with_root(opened?));
            let stdin = io::stdin().lock();
            logbook_api::serve::serve(host, stdin, Box::new(io::stdout()))
                .map_err(|err| ApiError::new(ErrorCode::Io, format!("serve: {err}")))
        }
        #[cfg(feature = "replica")]
        Command::Replicate { to, endpoint, once } => {
            existing_root(&root)?;
            replicate(&root, &to, endpoint.as_deref(), once, args.json)
        }
        #[cfg(feature = "replica")]
        Command::Restore { from, endpoint, at } => {
            let Some(dest) = &explicit_root else {
                return Err(ApiError::invalid(
                    "restore needs --root NEW_DIR: the directory to build the Root in (absent or empty)",
                ));
            };
            restore(dest, &from, endpoint.as_deref(), at.as_deref(), args.json)
        }
        Command::Mcp => logbook_api::mcp::serve_stdio(&root),
        Command::Demo => crate::cli::demo_entry(&root),
        // Neither needs a Root: both are made from the argument definitions above.
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Args::command(), "logbook", &mut io::stdout());
            Ok(())
        }
        Command::Man => {
            use clap::CommandFactory as _;
            clap_mangen::Man::new(Args::command())
                .render(&mut io::stdout())
                .map_err(|e| ApiError::new(ErrorCode::Io, format!("writing the manual: {e}")))
        }
        command => {
            let options = logbook_engine::RootOptions {
                progress: logbook_engine::ProgressSink::new(Arc::new(progress::Bars::default())),
                read_only: args.read_only,
                ..logbook_engine::RootOptions::default()
            };
            // Only the commands that start Sessions make a Root; the others work on Sessions
            // that must already exist, so a mistyped `--root` is an error, not a new Root. A
            // reader makes nothing.
            let creates = matches!(command, Command::New { .. } | Command::Import { .. });
            let opened = if creates && !args.read_only {
                logbook_engine::Root::open_or_init_with(&root, options)
            } else {
                existing_root(&root)?;
                // A Root this process may not write is read as a reader at once, without
                // trying the writer lock (a read-only mount of a Root written elsewhere).
                let writable = rustix::fs::access(&root, rustix::fs::Access::WRITE_OK).is_ok();
                let options = logbook_engine::RootOptions {
                    read_only: options.read_only || (reads_only(&command) && !writable),
                    ..options
                };
                match logbook_engine::Root::open_with(&root, options.clone()) {
                    // A command that only reads goes on as a reader beside the process that
                    // holds the Root (a running host), or on a Root it may not write.
                    Err(e) if reads_only(&command) && may_read_beside(&e) => {
                        let options = logbook_engine::RootOptions {
                            read_only: true,
                            ..options
                        };
                        logbook_engine::Root::open_with(&root, options).map_err(|_| e)
                    }
                    opened => opened,
                }
            };
            let ctx = Ctx {
                host: Host::with_root(opened?),
                json: args.json,
            };
            run_command(&ctx, command)
        }
    }
}

/// True for the commands that never change the Root: they may run as a reader beside a writer.
fn reads_only(command: &Command) -> bool {
    matches!(
        command,
        Command::Sessions { .. }
            | Command::History { .. }
            | Command::Search { .. }
            | Command::Source { .. }
            | Command::Diagnostics { .. }
            | Command::Context { .. }
            | Command::Ls { .. }
            | Command::Cat { .. }
            | Command::Git { .. }
            | Command::Verify
            | Command::Export { .. }
    )
}

/// True when opening the Root to write failed in a way a reader does not: another process
/// holds the writer lock, or the Root may not be written here (permissions, a read-only
/// mount).
fn may_read_beside(e: &logbook_engine::EngineError) -> bool {
    use logbook_engine::ErrorKind;
    let mut cause = std::error::Error::source(e);
    let mut read_only_fs = false;
    while let Some(c) = cause {
        read_only_fs |= c
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ReadOnlyFilesystem);
        cause = c.source();
    }
    matches!(e.kind(), ErrorKind::Busy | ErrorKind::PermissionDenied) || read_only_fs
}

#[cfg(feature = "replica")]
/// `logbook replicate`: rounds until killed (or one with `--once`), each manifest reported.
fn replicate(
    root: &std::path::Path,
    to: &str,
    endpoint: Option<&str>,
    once: bool,
    json: bool,
) -> Result<(), ApiError> {
    let target = logbook_replica::Target::from_env(to, endpoint)?;
    let store = logbook_replica::Store::connect(&target)?;
    let mut replicator = logbook_replica::Replicator::open(root, store)?;
    let report = |r: &logbook_replica::RoundReport| {
        let Some(manifest) = &r.manifest else {
            if let Some(why) = &r.held_back {
                eprintln!("round {}: manifest held back: {why}", r.round);
            }
            return;
        };
        if json {
            println!(
                "{}",
                json!({"round": r.round, "manifest": manifest, "manifestMs": r.manifest_ms,
                       "startedMs": r.started_ms,
                       "full": r.full, "puts": r.puts, "putBytes": r.put_bytes,
                       "adopted": r.adopted, "logsRead": r.logs_read})
            );
        } else {
            println!(
                "round {}: {} objects, {} bytes, {} manifest {manifest}",
                r.round,
                r.puts,
                r.put_bytes,
                if r.full { "full" } else { "delta" }
            );
        }
    };
    if once {
        let r = replicator.round()?;
        report(&r);
        return Ok(());
    }
    eprintln!(
        "replicating {} to {} (stop with Ctrl-C; the next run resumes)",
        root.display(),
        target.location()
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    replicator
        .run(&stop, |outcome| match outcome {
            Ok(r) => report(r),
            Err(e) => eprintln!("round failed, trying again: {e}"),
        })
        .map_err(ApiError::from)
}

/// `logbook restore`.
#[cfg(feature = "replica")]
fn restore(
    dest: &std::path::Path,
    from: &str,
    endpoint: Option<&str>,
    at: Option<&str>,
    json: bool,
) -> Result<(), ApiError> {
    let at_ms = at.map(at_time).transpose()?;
    let target = logbook_replica::Target::from_env(from, endpoint)?;
    let store = logbook_replica::Store::connect(&target)?;
    let r = logbook_replica::restore(&store, dest, at_ms)?;
    if json {
        println!(
            "{}",
            json!({"manifest": r.manifest, "round": r.round, "createdMs": r.created_ms,
                   "manifests": r.manifests, "objects": r.objects, "bytes": r.bytes,
                   "sessions": r.sessions, "records": r.records})
        );
    } else {
        println!(
            "restored {} Sessions ({} records, {} objects, {} bytes) into {} as of {} (manifest {}); verify: clean",
            r.sessions,
            r.records,
            r.objects,
            r.bytes,
            dest.display(),
            show::rfc3339(r.created_ms),
            r.manifest
        );
    }
    Ok(())
}

#[cfg(feature = "replica")]
/// `--at`: RFC 3339, milliseconds since the epoch, or a span back from now.
fn at_time(text: &str) -> Result<u64, ApiError> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    if let Some(ms) = logbook_engine::parse_rfc3339_ms(text) {
        return Ok(ms);
    }
    let spanned = since_time(text)?;
    logbook_engine::parse_rfc3339_ms(&spanned).ok_or_else(|| {
        ApiError::invalid(format!(
            "--at {text:?} is not a time: give RFC 3339 (2026-12-05T07:40:00Z), milliseconds \
             since the epoch, or a span back from now (30s, 15m, 2h, 1d)"
        ))
    })
}

/// `not_found` unless a Root is at `root` (commands that make no Root never make one).
fn existing_root(root: &std::path::Path) -> Result<(), ApiError> {
    if root.join("logbook.root").exists() || root.join("root-log").exists() {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no Root at {} (make one with `logbook init` or `logbook new`, or name it with --root or LOGBOOK_ROOT)",
            root.display()
        ),
    ))
}

fn demo_entry(root: &std::path::Path) -> Result<(), ApiError> {
    logbook_api::demo::run(root)
}

fn path_param(path: &str) -> Value {
    use base64::Engine as _;
    json!({ "bytesBase64": base64::engine::general_purpose::STANDARD.encode(path.as_bytes()) })
}

fn derived_operation(prefix: &str, parts: &[&[u8]]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let hex: String = h
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{prefix}-{hex}")
}

/// A workspace for a new Session: an existing directory, named without a symbolic link at
/// its end (reads never follow one, so a Session over a link would answer nothing).
fn check_workspace(w: &std::path::Path) -> Result<(), ApiError> {
    let shown = w.display();
    match std::fs::symlink_metadata(w) {
        Err(e) => Err(ApiError::invalid(format!("workspace {shown}: {e}"))),
        Ok(m) if m.file_type().is_symlink() => Err(ApiError::invalid(format!(
            "workspace {shown} is a symbolic link; name the directory it points to"
        ))),
        Ok(m) if !m.is_dir() => Err(ApiError::invalid(format!(
            "workspace {shown} is not a directory"
        ))),
        Ok(_) => Ok(()),
    }
}

/// An operation id no earlier run used: `what` with the time, the process and a counter, for
/// commands whose every run is a new mutation.
fn fresh_operation(prefix: &str, what: &[u8]) -> String {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    derived_operation(
        prefix,
        &[
            what,
            &now.as_nanos().to_le_bytes(),
            &std::process::id().to_le_bytes(),
            &run.to_le_bytes(),
        ],
    )
}

fn run_command(ctx: &Ctx, command: Command) -> Result<(), ApiError> {
    match command {
        Command::Sessions {
            limit,
            workspace,
            by_id,
        } => {
            let mut left = limit.unwrap_or(u64::MAX);
            let mut after = Value::Null;
            let workspace = workspace.map(|w| std::path::absolute(&w).unwrap_or(w));
            if !ctx.json {
                show::sessions_header();
            }
            while left > 0 {
                let page = ctx.call(
                    "sessions",
                    json!({"after": after, "limit": left.min(1024), "workspace": workspace,
                           "order": if by_id { "id" } else { "lastActivity" }}),
                )?;
                left =
                    left.saturating_sub(page["sessions"].as_array().map_or(0, |a| a.len() as u64));
                ctx.print(&page, show::sessions);
                after = page["nextAfter"].clone();
                if after.is_null() {
                    break;
                }
            }
        }
        Command::Title {
            session,
            title,
            operation,
        } => {
            // A fresh operation per run: the same title set again later is a new mutation.
            let operation =
                operation.unwrap_or_else(|| fresh_operation("cli-title", session.as_bytes()));
            let v = ctx.call(
                "setTitle",
                json!({"sessionId": session, "operation": operation, "title": title}),
            )?;
            ctx.print(&v, |v| println!("titled at sequence {}", v["sequence"]));
        }
        Command::New {
            id,
            workspace,
            operation,
        } => {
            let workspace = workspace.map(|w| std::path::absolute(&w).unwrap_or(w));
            if let Some(w) = &workspace {
                check_workspace(w)?;
            }
            // A fresh operation per run: each `new` without `--operation` is a new Session.
            let op = operation.unwrap_or_else(|| {
                fresh_operation("cli-new", id.as_deref().unwrap_or("").as_bytes())
            });
            let v = ctx.call(
                "createSession",
                json!({"sessionId": id, "workspace": workspace, "operation": op}),
            )?;
            ctx.print(&v, |v| {
                println!("{}", v["sessionId"].as_str().unwrap_or(""))
            });
        }
        Command::Send {
            session,
            text,
            operation,
        } => {
            let op = operation.unwrap_or_else(|| fresh_operation("cli-send", session.as_bytes()));
            let v = ctx.call(
                "send",
                json!({"sessionId": session, "operation": op, "text": text, "attachments": []}),
            )?;
            ctx.print(&v, |v| {
                println!(
                    "sent as sequence {}, invocation {}",
                    v["sequence"],
                    v["invocation"].as_str().unwrap_or("")
                )
            });
        }
        Command::Append {
            session,
            file,
            operation,
        } => {
            let mut text = String::new();
            if file.as_os_str() == "-" {
                io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| ApiError::new(ErrorCode::Io, format!("reading stdin: {e}")))?;
            } else {
                text = std::fs::read_to_string(&file).map_err(|e| {
                    ApiError::new(ErrorCode::Io, format!("reading {}: {e}", file.display()))
                })?;
            }
            let mut events = Vec::new();
            let name = if file.as_os_str() == "-" {
                "standard input".to_owned()
            } else {
                file.display().to_string()
            };
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                // Each line is checked alone, so a mistake is reported at its file and line
                // (not at a column of the request the lines are sent in).
                if let Err(e) = serde_json::from_str::<logbook_engine::Event>(line) {
                    return Err(ApiError::invalid(format!(
                        "{name}, line {}: not an event: {e}",
                        n + 1
                    )));
                }
                events.push(RawValue::from_string(line.to_owned()).expect("parsed just above"));
            }
            // The Session's revision before, to tell a repeat (answered from its receipts)
            // from new events.
            let before = if ctx.json {
                None
            } else {
                ctx.call("history", json!({"sessionId": session, "limit": 1}))?["through"].as_u64()
            };
            let op = operation.unwrap_or_else(|| {
                derived_operation("cli-append", &[session.as_bytes(), text.as_bytes()])
            });
            // A file of more events than one append takes goes in batches, each with its own
            // operation derived from the whole one, so a repeated run repeats every batch.
            let batches: Vec<&[Box<RawValue>]> = if events.is_empty() {
                vec![&[][..]]
            } else {
                events
                    .chunks(logbook_engine::validate::APPEND_EVENTS_MAX)
                    .collect()
            };
            let single = batches.len() == 1;
            let mut first = None;
            let mut last = Value::Null;
            for (i, batch) in batches.into_iter().enumerate() {
                let joined: Vec<&str> = batch.iter().map(|r| r.get()).collect();
                let batch_op = if single {
                    op.clone()
                } else {
                    format!("{op}-{i}")
                };
                let params = format!(
                    "{{\"sessionId\":{},\"operation\":{},\"events\":[{}]}}",
                    Value::from(session.clone()),
                    Value::from(batch_op),
                    joined.join(",")
                );
                let raw = RawValue::from_string(params).expect("assembled from valid JSON parts");
                let answer = dispatch::call(&ctx.host, "append", Some(&raw), &mut |_| {})?;
                let v: Value =
                    serde_json::from_str(answer.get()).expect("the dispatcher writes JSON");
                if ctx.json {
                    println!("{v}");
                }
                first.get_or_insert_with(|| v["firstSequence"].clone());
                last = v["lastSequence"].clone();
            }
            if !ctx.json {
                let first = first.unwrap_or(Value::Null);
                match (before, last.as_u64()) {
                    (Some(b), Some(l)) if l <= b => println!(
                        "already appended as sequences {first} to {last}: nothing new (a repeat of the same events)"
                    ),
                    _ => println!("appended sequences {first} to {last}"),
                }
            }
        }
        Command::History {
            session,
            through,
            limit,
            backward,
            all,
        } => {
            // `--limit` rows in pages of at most what one page holds (all of them with --all).
            let mut left = if all { u64::MAX } else { u64::from(limit) };
            let page_rows = |left: u64| left.min(u64::from(logbook_engine::PAGE_ROWS_MAX)) as u32;
            if ctx.json {
                let direction = if backward { "backward" } else { "forward" };
                let mut after = Value::Null;
                let mut through = through.map(Value::from).unwrap_or(Value::Null);
                while left > 0 {
                    let v = ctx.call(
                        "history",
                        json!({"sessionId": session, "through": through, "after": after,
                               "limit": page_rows(left), "direction": direction}),
                    )?;
                    println!("{v}");
                    left = left.saturating_sub(v["rows"].as_array().map_or(0, |r| r.len() as u64));
                    through = v["through"].clone();
                    after = v["nextAfter"].clone();
                    if after.is_null() {
                        break;
                    }
                }
            } else {
                // Rows printed from the engine's borrowed rows: a page is neither copied nor
                // written as JSON and parsed back just to print a line per row.
                let mut p = logbook_engine::HistoryParams {
                    session_id: session,
                    through,
                    after: None,
                    limit: None,
                    anchor: None,
                    direction: Some(if backward {
                        logbook_engine::Direction::Backward
                    } else {
                        logbook_engine::Direction::Forward
                    }),
                };
                let mut out = String::new();
                while left > 0 {
                    p.limit = Some(page_rows(left));
                    out.clear();
                    let mut n = 0u64;
                    let end = ctx.host.root().history_each(p.clone(), |row| {
                        n += 1;
                        show::row(&mut out, &row);
                    })?;
                    // The page printed whole: one write, not one per row.
                    print!("{out}");
                    left = left.saturating_sub(n);
                    p.through = Some(end.through);
                    p.after = end.next_after;
                    if p.after.is_none() {
                        break;
                    }
                }
                if p.after.is_some() {
                    println!("(more rows: --all shows every one, --limit N the next N)");
                }
            }
        }
        Command::Search {
            words,
            all,
            workspace,
            since,
            case_sensitive,
            ignore_case: _,
            whole_word,
            through,
            max_hits,
        } => {
            if all {
                let [query] = <[String; 1]>::try_from(words).map_err(|_| {
                    ApiError::invalid("search --all takes one QUERY and no Session")
                })?;
                if through.is_some() {
                    return Err(ApiError::invalid(
                        "--through names a revision of one Session; search --all takes none",
                    ));
                }
                let since = since.as_deref().map(since_time).transpose()?;
                return search_all(
                    ctx,
                    &query,
                    case_sensitive,
                    whole_word,
                    workspace,
                    since,
                    max_hits,
                );
            }
            let [session, query] = <[String; 2]>::try_from(words)
                .map_err(|_| ApiError::invalid("search takes SESSION QUERY, or --all QUERY"))?;
            let mut after = Value::Null;
            let mut through = through.map(Value::from).unwrap_or(Value::Null);
            let mut hits = 0usize;
            while hits < max_hits {
                // Each page asks for at most the hits still wanted, so exactly `max_hits` print.
                let limit = (max_hits - hits).min(logbook_engine::SEARCH_HITS_MAX as usize);
                let v = ctx.call(
                    "search",
                    json!({"sessionId": session, "query": query, "caseSensitive": case_sensitive,
                           "wholeWord": whole_word, "through": through, "after": after,
                           "limit": limit}),
                )?;
                hits += v["hits"].as_array().map_or(0, Vec::len);
                ctx.print(&v, |v| show::hits(ctx, &session, v));
                through = v["through"].clone();
                after = v["nextAfter"].clone();
                if after.is_null() {
                    break;
                }
            }
            if !ctx.json {
                println!("{hits} hit(s)");
            }
        }
        Command::Source {
            session,
            sequence,
            item,
            field,
        } => {
            let mut after = Value::Null;
            let mut stdout = io::stdout().lock();
            let mut ends_line = true;
            loop {
                let v = ctx.call(
                    "source",
                    json!({"sessionId": session, "through": null, "field": field, "after": after,
                           "position": {"sourceSequence": sequence, "itemIndex": item}}),
                )?;
                if ctx.json {
                    println!("{v}");
                } else {
                    let text = show::contents(v["text"].as_str().unwrap_or(""));
                    let _ = stdout.write_all(text.as_bytes());
                    if !text.is_empty() {
                        ends_line = text.ends_with('\n');
                    }
                }
                after = v["nextAfter"].clone();
                if after.is_null() {
                    break;
                }
            }
            // On a terminal the prompt starts on a line of its own; into a pipe or file the
            // field stays exact.
            if !ctx.json && !ends_line && std::io::IsTerminal::is_terminal(&stdout) {
                let _ = writeln!(stdout);
            }
        }
        Command::Fork {
            session,
            turn,
            operation,
        } => {
            // A history page answers the Session's current revision as its fence.
            let page = ctx.call("history", json!({"sessionId": session, "limit": 1}))?;
            let revision = page["through"].clone();
            let from = match &turn {
                Some(inv) => json!({"kind": "turn", "invocation": inv}),
                None => json!({"kind": "all"}),
            };
            let op = operation.unwrap_or_else(|| {
                derived_operation(
                    "cli-fork",
                    &[
                        session.as_bytes(),
                        revision.to_string().as_bytes(),
                        from.to_string().as_bytes(),
                    ],
                )
            });
            let v = ctx.call(
                "fork",
                json!({"sessionId": session, "operation": op, "from": from, "revision": revision}),
            )?;
            ctx.print(&v, |v| {
                println!("forked into {}", v["sessionId"].as_str().unwrap_or(""))
            });
        }
        Command::Diagnostics { session } => {
            let v = ctx.call(
                "diagnostics",
                json!({"sessionId": session, "through": null}),
            )?;
            ctx.print(&v, |v| {
                println!("{}", serde_json::to_string_pretty(v).unwrap_or_default())
            });
        }
        Command::Context { session } => {
            let v = ctx.call("context", json!({"sessionId": session, "through": null}))?;
            ctx.print(&v, |v| {
                println!("{}", serde_json::to_string_pretty(v).unwrap_or_default())
            });
        }
        Command::Ls { session, path } => {
            let mut after = Value::Null;
            loop {
                let v = ctx.call(
                    "listFiles",
                    json!({"sessionId": session, "path": path_param(&path), "after": after}),
                )?;
                ctx.print(&v, show::entries);
                after = v["next"].clone();
                if after.is_null() {
                    break;
                }
            }
        }
        Command::Cat { session, path } => cat(ctx, &session, &path)?,
        Command::Git { command } => match command {
            GitCommand::Status { session } => {
                let v = ctx.call("gitStatus", json!({"sessionId": session}))?;
                ctx.print(&v, show::git_status);
            }
            GitCommand::Diff {
                session,
                path,
                area,
            } => {
                let v = ctx.call(
                    "gitDiff",
                    json!({"sessionId": session, "path": path_param(&path), "area": area}),
                )?;
                ctx.print(&v, |v| match v["kind"].as_str() {
                    Some("text") => print!("{}", show::contents(v["patch"].as_str().unwrap_or(""))),
                    Some(kind) => println!(
                        "({kind}{})",
                        v["reason"]
                            .as_str()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    ),
                    None => println!("{v}"),
                });
            }
        },
        Command::Patch { session, operation } => {
            let op = operation.unwrap_or_else(|| fresh_operation("cli-patch", session.as_bytes()));
            let info = ctx.call(
                "snapshotPatch",
                json!({"sessionId": session, "operation": op}),
            )?;
            if ctx.json {
                println!("{info}");
                return Ok(());
            }
            let mut after = Value::Null;
            loop {
                let v = ctx.call(
                    "readPatch",
                    json!({"sessionId": session, "patchId": info["patchId"], "after": after}),
                )?;
                print!("{}", show::contents(v["text"].as_str().unwrap_or("")));
                after = v["nextAfter"].clone();
                if after.is_null() {
                    break;
                }
            }
            eprintln!(
                "patch {} ({} bytes, {})",
                info["patchId"], info["bytes"], info["digest"]
            );
        }
        Command::Verify => {
            // The Root reports its progress to the bars set up in `run`.
            let v = ctx.call("verify", json!({}))?;
            ctx.print(&v, show::verify);
            if v["damage"].as_array().is_some_and(|d| !d.is_empty()) {
                return Err(ApiError::new(
                    logbook_api::ErrorCode::Corrupt,
                    "verify found damage (listed above)",
                ));
            }
        }
        Command::Export {
            session,
            output,
            through,
        } => {
            match output {
                Some(file) => {
                    let file = std::path::absolute(&file).map_err(|e| {
                        ApiError::invalid(format!("output {}: {e}", file.display()))
                    })?;
                    let r = ctx.call(
                        "exportSession",
                        json!({"sessionId": session, "through": through, "path": file}),
                    )?;
                    ctx.print(&r, |r| {
                        println!(
                            "wrote Session {session} to {} ({} bytes, {})",
                            show::printable(&file.display().to_string(), false),
                            r["bytes"],
                            r["digest"].as_str().unwrap_or("")
                        )
                    });
                }
                None => {
                    use std::io::IsTerminal as _;
                    let stdout = io::stdout();
                    if stdout.is_terminal() {
                        return Err(ApiError::invalid(
                            "standard output is a terminal: name a file with -o FILE, or redirect it",
                        ));
                    }
                    let params = logbook_engine::ExportSessionParams {
                        session_id: session,
                        through,
                    };
                    let mut out = io::BufWriter::with_capacity(1 << 20, stdout.lock());
                    let r = ctx.host.root().export_session(&params, &mut out)?;
                    io::Write::flush(&mut out).map_err(|e| {
                        ApiError::new(ErrorCode::Io, format!("writing standard output: {e}"))
                    })?;
                    if ctx.json {
                        // The bundle is on standard output: the answer goes to standard error.
                        eprintln!("{}", serde_json::to_value(r)?);
                    }
                }
            }
        }
        Command::Import { files, workspace } => {
            logbook_api::import::run(&ctx.host, &files, workspace.as_deref(), ctx.json)?;
        }
        #[cfg(feature = "replica")]
        Command::Replicate { .. } | Command::Restore { .. } => {
            unreachable!("handled before a Host is opened")
        }
        Command::Init
        | Command::Serve
        | Command::Mcp
        | Command::Demo
        | Command::Completions { .. }
        | Command::Man => {
            unreachable!("handled before a Host is opened")
        }
    }
    Ok(())
}

/// `search --all`: `searchRoot` pages until `max_hits` hits or the end.
fn search_all(
    ctx: &Ctx,
    query: &str,
    case_sensitive: bool,
    whole_word: bool,
    workspace: Option<String>,
    since: Option<String>,
    max_hits: usize,
) -> Result<(), ApiError> {
    let scope = json!({"workspace": workspace, "activeSince": since});
    let mut after = Value::Null;
    let mut hits = 0usize;
    let mut last_session = String::new();
    while hits < max_hits {
        let limit = (max_hits - hits).min(logbook_engine::SEARCH_HITS_MAX as usize);
        let v = ctx.call(
            "searchRoot",
            json!({"query": query, "caseSensitive": case_sensitive, "wholeWord": whole_word,
                   "scope": scope, "after": after, "limit": limit}),
        )?;
        let n = v["hits"].as_array().map_or(0, Vec::len);
        hits += n;
        // Pages without hits (work bounded per page) print nothing.
        if ctx.json {
            if n > 0 || v["nextAfter"].is_null() {
                println!("{v}");
            }
        } else {
            show::root_hits(ctx, &v, &mut last_session);
        }
        after = v["nextAfter"].clone();
        if after.is_null() {
            break;
        }
    }
    if !ctx.json {
        println!("{hits} hit(s)");
    }
    Ok(())
}

/// `--since`: an RFC 3339 time as it is, or a span back from now (`30m`, `12h`, `7d`, `2w`)
/// as the RFC 3339 time it names.
fn since_time(text: &str) -> Result<String, ApiError> {
    let unit = |c: char| match c {
        's' => Some(1_000u64),
        'm' => Some(60_000),
        'h' => Some(3_600_000),
        'd' => Some(86_400_000),
        'w' => Some(604_800_000),
        _ => None,
    };
    let span = text
        .char_indices()
        .last()
        .and_then(|(i, c)| Some((text[..i].parse::<u64>().ok()?, unit(c)?)))
        .and_then(|(n, u)| n.checked_mul(u));
    match span {
        Some(span) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            Ok(show::rfc3339(now.saturating_sub(span)))
        }
        // Anything else goes to the server as it is, which names what is wrong with it.
        None => Ok(text.to_owned()),
    }
}

fn cat(ctx: &Ctx, session: &str, path: &str) -> Result<(), ApiError> {
    use base64::Engine as _;
    let raw =
        RawValue::from_string(json!({"sessionId": session, "path": path_param(path)}).to_string())
            .expect("a Value always encodes");
    let mut stdout = io::stdout().lock();
    let mut outcome = None;
    dispatch::call(&ctx.host, "readFile", Some(&raw), &mut |item| {
        let item: Value = serde_json::from_str(item.get()).expect("the dispatcher writes JSON");
        if ctx.json {
            let _ = writeln!(stdout, "{item}");
            return;
        }
        match item["kind"].as_str() {
            Some("chunk") => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(item["dataBase64"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                // Text chunks end on UTF-8 boundaries, so each can be escaped alone.
                let _ = match std::str::from_utf8(&data) {
                    Ok(text) => stdout.write_all(show::contents(text).as_bytes()),
                    Err(_) => stdout.write_all(&data),
                };
            }
            Some("begin") | Some("end") => {}
            Some(other) => outcome = Some(other.to_owned()),
            None => {}
        }
    })?;
    match outcome.as_deref() {
        None => Ok(()),
        Some("absent") => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("{path}: no such file in the workspace"),
        )),
        Some(kind) => Err(ApiError::new(
            ErrorCode::Unsupported,
            format!("{path}: not printed ({kind})"),
        )),
    }
}
