//! [`Host`]: one synchronous API over a Root, a Session's workspace and its git state.
//!
//! Storage operations go to the engine's [`Root`]; workspace reads go to
//! `logbook-fs` through a handle opened once per Session; git views go to
//! `logbook-git`. The Host holds no storage logic of its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use logbook_engine::Root;
use logbook_fs::{DirWatch, HiddenSet, RelPath, WatchCloser, Workspace};

use crate::error::{ApiError, ErrorCode};
use crate::wire::*;

/// The longest a `watchFilesNext` may wait, so a forgotten request cannot pin a thread for ever.
pub const WATCH_TIMEOUT_MS_MAX: u64 = 600_000;
/// The wait of a `watchFilesNext` that names none.
pub const WATCH_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Open file watches per Host; more is `busy` until some are closed.
pub const FILE_WATCHES_MAX: usize = 1024;

/// An open file watch: the closer is reachable without the lock a waiting
/// `watchFilesNext` holds.
#[derive(Debug)]
struct FileWatch {
    closer: WatchCloser,
    watch: Mutex<Option<DirWatch>>,
}

/// The Host API: open a Root once, then call any operation from any thread.
///
/// ```no_run
/// use logbook_api::Host;
/// let host = Host::open(std::path::Path::new("/tmp/example-root")).unwrap();
/// for session in host.root().sessions().unwrap() {
///     println!("{}", session.session_id);
/// }
/// ```
#[derive(Debug)]
pub struct Host {
    root: Root,
    workspaces: Mutex<HashMap<String, Arc<Workspace>>>,
    watches: Mutex<HashMap<String, Arc<FileWatch>>>,
    next_watch: AtomicU64,
    /// Set by [`Host::end_waits`]: a file watch woken by it answers `timeout`.
    waits_ended: AtomicBool,
}

impl Host {
    /// Opens an existing Root (`busy` when another process holds it).
    pub fn open(root: &Path) -> Result<Host, ApiError> {
        Ok(Host::with_root(Root::open(root)?))
    }

    /// Opens a Root as a reader beside the process that writes it: no lock, nothing written,
    /// the writer's commits seen on the next read (within 100 ms); every mutation answers
    /// `permission_denied` (see `logbook_engine::Root::open_read_only`).
    pub fn open_read_only(root: &Path) -> Result<Host, ApiError> {
        Ok(Host::with_root(Root::open_read_only(root)?))
    }

    /// Opens a Root, creating it first when the directory is absent or empty.
    pub fn open_or_init(root: &Path) -> Result<Host, ApiError> {
        Ok(Host::with_root(Root::open_or_init(root)?))
    }

    pub fn with_root(root: Root) -> Host {
        Host {
            root,
            workspaces: Mutex::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
            next_watch: AtomicU64::new(1),
            waits_ended: AtomicBool::new(false),
        }
    }

    /// Ends every wait, for a server whose input has ended: each `watch`,
    /// `watchDiagnostics` and `watchFilesNext` in progress answers now, and each later one
    /// at once, with exactly what it answers when its timeout passes. File watches are
    /// closed for good (the server is going away); nothing else changes.
    pub fn end_waits(&self) {
        self.waits_ended.store(true, Ordering::Release);
        self.root.end_waits();
        let watches: Vec<Arc<FileWatch>> = self
            .watches
            .lock()
            .expect("watch table lock poisoned")
            .values()
            .cloned()
            .collect();
        for w in watches {
            w.closer.close();
        }
    }

    /// The engine, for every storage operation (history, search, fork, ...).
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The Session's workspace directory, or `invalid_argument` when it has none.
    pub fn workspace_dir(&self, session_id: &str) -> Result<PathBuf, ApiError> {
        let info = self.root.session_info(session_id)?;
        match info.workspace {
            Some(dir) => Ok(PathBuf::from(dir)),
            None => Err(ApiError::invalid(format!(
                "session {session_id:?} has no workspace; give one when creating the session"
            ))),
        }
    }

    fn workspace(&self, session_id: &str) -> Result<Arc<Workspace>, ApiError> {
        let mut cache = self
            .workspaces
            .lock()
            .expect("workspace cache lock poisoned");
        if let Some(ws) = cache.get(session_id) {
            return Ok(ws.clone());
        }
        let dir = self.workspace_dir(session_id)?;
        let hidden = hidden_paths(&dir, self.root.path());
        let ws = Arc::new(Workspace::open(&dir, &hidden)?);
        cache.insert(session_id.to_owned(), ws.clone());
        Ok(ws)
    }

    pub fn list_files(&self, p: ListFilesParams) -> Result<ListFilesResult, ApiError> {
        let ws = self.workspace(&p.session_id)?;
        let path = rel_path(p.path.as_ref())?;
        let page = ws.list(&path, p.after.as_deref())?;
        Ok(ListFilesResult {
            directory_identity: page.directory_identity,
            entries: page
                .entries
                .into_iter()
                .map(|e| FileEntry {
                    name: WirePath::from_bytes(&e.name),
                    kind: match e.kind {
                        logbook_fs::EntryKind::File => FileKind::File,
                        logbook_fs::EntryKind::Directory => FileKind::Directory,
                        logbook_fs::EntryKind::Symlink => FileKind::Symlink,
                        _ => FileKind::Other,
                    },
                    size: e.size,
                })
                .collect(),
            next: page.next,
        })
    }

    /// Reads one file and hands its items to `sink` in order: `begin`, chunks, `end`,
    /// or one `absent` / `changed` / `binary` / `unsupported` item.
    pub fn read_file(
        &self,
        p: ReadFileParams,
        sink: &mut dyn FnMut(ReadFileItem),
    ) -> Result<(), ApiError> {
        let ws = self.workspace(&p.session_id)?;
        let path = RelPath::parse(&p.path.decode()?)?;
        match ws.read(&path, p.expected_version.as_deref())? {
            logbook_fs::ReadOutcome::Content(content) => {
                sink(ReadFileItem::Begin {
                    version: content.version.clone(),
                    size: content.size,
                    content_type: content.content_type.clone(),
                });
                for (offset, bytes) in content.chunks() {
                    sink(ReadFileItem::Chunk {
                        offset,
                        data_base64: B64.encode(bytes),
                    });
                }
                sink(ReadFileItem::End {
                    version: content.version.clone(),
                    size: content.size,
                    digest: content.digest.clone(),
                });
            }
            logbook_fs::ReadOutcome::Absent => sink(ReadFileItem::Absent),
            logbook_fs::ReadOutcome::Changed => sink(ReadFileItem::Changed),
            logbook_fs::ReadOutcome::Binary => sink(ReadFileItem::Binary),
            _ => sink(ReadFileItem::Unsupported),
        }
        Ok(())
    }

    pub fn watch_files_open(
        &self,
        p: WatchFilesOpenParams,
    ) -> Result<WatchFilesOpenResult, ApiError> {
        let ws = self.workspace(&p.session_id)?;
        let path = rel_path(p.path.as_ref())?;
        let mut watches = self.watches.lock().expect("watch table lock poisoned");
        if watches.len() >= FILE_WATCHES_MAX {
            return Err(ApiError::new(
                ErrorCode::Busy,
                format!("{FILE_WATCHES_MAX} file watches are open; close some first"),
            ));
        }
        let watch = ws.watch(&path)?;
        let directory_identity = watch.directory_identity().to_owned();
        let watch_id = format!("w{}", self.next_watch.fetch_add(1, Ordering::Relaxed));
        let slot = FileWatch {
            closer: watch.closer(),
            watch: Mutex::new(Some(watch)),
        };
        watches.insert(watch_id.clone(), Arc::new(slot));
        Ok(WatchFilesOpenResult {
            watch_id,
            directory_identity,
        })
    }

    /// Waits for the next notification of a watch (blocks up to `timeoutMs`).
    pub fn watch_files_next(
        &self,
        p: WatchFilesNextParams,
    ) -> Result<WatchFilesNextResult, ApiError> {
        let timeout = p
            .timeout_ms
            .unwrap_or(WATCH_TIMEOUT_MS_DEFAULT)
            .min(WATCH_TIMEOUT_MS_MAX);
        let slot = self.watch_slot(&p.watch_id)?;
        let mut guard = slot.watch.lock().expect("watch lock poisoned");
        let Some(watch) = guard.as_mut() else {
            return Err(ApiError::not_found(format!(
                "watch {:?} is closed",
                p.watch_id
            )));
        };
        let event = match watch.next(Duration::from_millis(timeout))? {
            // Closed by `end_waits`, not by `watchFilesClose`: answer as at the timeout.
            _ if slot.closer.is_closed() && self.waits_ended.load(Ordering::Acquire) => {
                FileWatchEvent::Timeout
            }
            _ if slot.closer.is_closed() => {
                return Err(ApiError::not_found(format!(
                    "watch {:?} was closed while waiting",
                    p.watch_id
                )))
            }
            logbook_fs::WatchEvent::Changed => FileWatchEvent::Changed,
            logbook_fs::WatchEvent::Unavailable => FileWatchEvent::Unavailable,
            _ => FileWatchEvent::Timeout,
        };
        Ok(WatchFilesNextResult { event })
    }

    /// Closes a watch. A `watchFilesNext` in progress on it is woken (it answers
    /// `not_found`) and settles before this returns.
    pub fn watch_files_close(&self, p: WatchFilesCloseParams) -> Result<(), ApiError> {
        let slot = self
            .watches
            .lock()
            .expect("watch table lock poisoned")
            .remove(&p.watch_id)
            .ok_or_else(|| ApiError::not_found(format!("no open watch {:?}", p.watch_id)))?;
        slot.closer.close();
        let watch = slot.watch.lock().expect("watch lock poisoned").take();
        if let Some(watch) = watch {
            watch.close();
        }
        Ok(())
    }

    fn watch_slot(&self, watch_id: &str) -> Result<Arc<FileWatch>, ApiError> {
        self.watches
            .lock()
            .expect("watch table lock poisoned")
            .get(watch_id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no open watch {watch_id:?}")))
    }

    /// What the workspace views hide in `dir` (`.git`, `.logbook` and the Root when it lies
    /// inside the workspace), for the git views: they must hide exactly the same.
    fn hidden_in(&self, dir: &Path) -> Result<HiddenSet, ApiError> {
        Ok(HiddenSet::new(&hidden_paths(dir, self.root.path()))?)
    }

    /// `null` when the workspace root holds no `.git`. Paths the workspace views hide are
    /// left out.
    pub fn git_status(&self, p: SessionParams) -> Result<Option<GitStatusResult>, ApiError> {
        let dir = self.workspace_dir(&p.session_id)?;
        let hidden = self.hidden_in(&dir)?;
        let Some(status) = logbook_git::status_hiding(&dir, &|p| hidden.hides_bytes(p))? else {
            return Ok(None);
        };
        let changes = |list: Vec<logbook_git::Change>| {
            list.into_iter()
                .map(|c| GitChange {
                    path: WirePath::from_bytes(&c.path),
                    change: match c.change {
                        logbook_git::ChangeKind::Added => GitChangeKind::Added,
                        logbook_git::ChangeKind::Deleted => GitChangeKind::Deleted,
                        logbook_git::ChangeKind::TypeChanged => GitChangeKind::TypeChanged,
                        _ => GitChangeKind::Modified,
                    },
                })
                .collect()
        };
        Ok(Some(GitStatusResult {
            head: status.head,
            staged: changes(status.staged),
            worktree: changes(status.worktree),
            untracked: status
                .untracked
                .iter()
                .map(|p| GitUntracked {
                    path: WirePath::from_bytes(p),
                })
                .collect(),
        }))
    }

    pub fn git_diff(&self, p: GitDiffParams) -> Result<GitDiffResult, ApiError> {
        let dir = self.workspace_dir(&p.session_id)?;
        let path = p.path.decode()?;
        // Refused with the very error `readFile` gives for the same path.
        let hidden = self.hidden_in(&dir)?;
        hidden.check(&path)?;
        let area = match p.area {
            GitArea::Staged => logbook_git::Area::Staged,
            GitArea::Worktree => logbook_git::Area::Worktree,
            GitArea::Untracked => logbook_git::Area::Untracked,
        };
        Ok(
            match logbook_git::diff_hiding(&dir, &path, area, &|p| hidden.hides_bytes(p))? {
                logbook_git::Diff::Text(patch) => GitDiffResult::Text { patch },
                logbook_git::Diff::Binary => GitDiffResult::Binary,
                logbook_git::Diff::Unchanged => GitDiffResult::Unchanged,
                logbook_git::Diff::Unsupported { reason } => GitDiffResult::Unsupported { reason },
                #[allow(unreachable_patterns)]
                _ => GitDiffResult::Unsupported {
                    reason: "a diff kind this build does not know".to_owned(),
                },
            },
        )
    }

    /// Captures the workspace change against HEAD and stores it immutably in the Root.
    /// A repeat of the operation returns the first capture, whatever changed since.
    pub fn snapshot_patch(
        &self,
        p: SnapshotPatchParams,
    ) -> Result<logbook_engine::PatchInfo, ApiError> {
        if let Some(info) = self.root.patch_receipt(&p.session_id, &p.operation)? {
            return Ok(info);
        }
        let dir = self.workspace_dir(&p.session_id)?;
        // Without the hidden paths: a Root inside the workspace would otherwise put its own
        // segments and earlier patches into every new patch.
        let hidden = self.hidden_in(&dir)?;
        let Some(bytes) = logbook_git::snapshot_patch_hiding(&dir, &|p| hidden.hides_bytes(p))?
        else {
            return Err(ApiError::new(
                ErrorCode::Unsupported,
                format!("the workspace {} holds no git repository", dir.display()),
            ));
        };
        Ok(self.root.store_patch(&p.session_id, &p.operation, bytes)?)
    }
}

impl Host {
    /// Writes a Session's bundle to `p.path`, a new file: written under a temporary name
    /// beside it, synced, then linked to its name (which fails, changing nothing, when the
    /// name exists) and the directory synced.
    pub fn export_session(
        &self,
        p: ExportSessionWire,
    ) -> Result<logbook_engine::ExportResult, ApiError> {
        let path = absolute("path", &p.path)?;
        if path.symlink_metadata().is_ok() {
            return Err(exists(&path));
        }
        let dir = path.parent().unwrap_or(Path::new("/"));
        let tmp = dir.join(format!(
            ".{}.partial-{}",
            path.file_name()
                .map_or("bundle".into(), |n| n.to_string_lossy()),
            std::process::id()
        ));
        let io = |what: &str, e: std::io::Error| ApiError::from_io(&tmp, what, e);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io("create", e))?;
        let written = (|| {
            let params = logbook_engine::ExportSessionParams {
                session_id: p.session_id,
                through: p.through,
            };
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut file);
            let r = self.root.export_session(&params, &mut out)?;
            std::io::Write::flush(&mut out).map_err(|e| io("write", e))?;
            drop(out);
            file.sync_all().map_err(|e| io("sync", e))?;
            match std::fs::hard_link(&tmp, &path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(exists(&path))
                }
                Err(e) => return Err(ApiError::from_io(&path, "link into place", e)),
            }
            Ok(r)
        })();
        let _ = std::fs::remove_file(&tmp);
        let r = written?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ApiError::from_io(dir, "sync directory", e))?;
        Ok(r)
    }

    /// Publishes the bundle at `p.path` as a Session of the Root.
    pub fn import_bundle(
        &self,
        p: ImportBundleWire,
    ) -> Result<logbook_engine::ImportResult, ApiError> {
        let path = absolute("path", &p.path)?;
        let mut file =
            std::fs::File::open(&path).map_err(|e| ApiError::from_io(&path, "open", e))?;
        let params = logbook_engine::ImportBundleParams {
            session_id: p.session_id,
            operation: p.operation,
        };
        Ok(self.root.import_bundle(&params, &mut file, &path)?)
    }
}

fn absolute(what: &str, p: &str) -> Result<PathBuf, ApiError> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(ApiError::invalid(format!(
            "{what} must be an absolute path on the serving machine, got {p:?}"
        )));
    }
    Ok(path)
}

fn exists(path: &Path) -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!(
            "{} exists; a bundle is written to a new file only",
            path.display()
        ),
    )
}

fn rel_path(path: Option<&WirePath>) -> Result<RelPath, ApiError> {
    match path {
        None => Ok(RelPath::root()),
        Some(p) => {
            let bytes = p.decode()?;
            if bytes.is_empty() {
                Ok(RelPath::root())
            } else {
                Ok(RelPath::parse(&bytes)?)
            }
        }
    }
}

/// The Root's folder, relative to the workspace, when the Root lives inside it.
fn hidden_paths(workspace: &Path, root: &Path) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_owned());
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    match root.strip_prefix(&workspace) {
        Ok(rel) if !rel.as_os_str().is_empty() => vec![rel.as_os_str().as_bytes().to_vec()],
        _ => Vec::new(),
    }
}
