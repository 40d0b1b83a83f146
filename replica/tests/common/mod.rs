//! A real S3 server for the tests: `s3s-fs` (crates.io) on a free loopback port, over a
//! folder of its own, with signature checking. Never a mock.

#![allow(dead_code, clippy::unwrap_used)]

use logbook_replica::{Store, Target};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "logbook-test-key";
pub const SECRET_KEY: &str = "logbook-test-secret";
pub const BUCKET: &str = "replica-test";

/// The s3s-fs binary: on PATH or in ~/.cargo/bin. Without it the test fails with an install
/// hint, unless LOGBOOK_SKIP_S3=1 (then `None`: the caller skips).
pub fn s3s_fs() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("s3s-fs"))
            .find(|p| p.is_file())
    });
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin/s3s-fs"));
    if let Some(p) = on_path.or(home.filter(|p| p.is_file())) {
        return Some(p);
    }
    if std::env::var("LOGBOOK_SKIP_S3").as_deref() == Ok("1") {
        eprintln!("s3s-fs not installed and LOGBOOK_SKIP_S3=1: skipping");
        return None;
    }
    panic!(
        "these tests need a real S3 server on loopback: install it with \
         `cargo install s3s-fs@0.14.1 --features binary --locked` (or set LOGBOOK_SKIP_S3=1 \
         to skip them)"
    );
}

/// A program on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// A running s3s-fs with one bucket.
pub struct S3 {
    bin: PathBuf,
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

/// The server's log, beside the bucket (kept for a failing test to show).
fn log_file(dir: &Path) -> Stdio {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("s3s-fs.log"))
        .unwrap();
    Stdio::from(f)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl S3 {
    /// Starts a server with an empty bucket; `None` when skipping.
    pub fn start() -> Option<S3> {
        let bin = s3s_fs()?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BUCKET)).unwrap();
        let mut s = S3 {
            bin,
            child: None,
            dir,
            port: free_port(),
        };
        s.restart();
        Some(s)
    }

    /// Stops the server (its folder stays).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and folder.
    pub fn restart(&mut self) {
        self.stop();
        // In a session of its own where `setsid` is there (it execs in place, so the child is
        // the server): the kernel's autogroup scheduling then gives the server its share of
        // the CPU as a service of its own, as a real store has, rather than one thread's share
        // among a busy Host's many in the same process group (the lag bench's 100 Sessions).
        let mut command = match which("setsid") {
            Some(setsid) => {
                let mut c = Command::new(setsid);
                c.arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = command
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log_file(self.dir.path()))
            .stderr(log_file(self.dir.path()))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    pub fn target(&self, prefix: &str) -> Target {
        Target::with_credentials(
            &self.url(prefix),
            Some(&self.endpoint()),
            "us-east-1",
            ACCESS_KEY,
            SECRET_KEY,
        )
        .unwrap()
    }

    pub fn store(&self, prefix: &str) -> Store {
        Store::connect(&self.target(prefix)).unwrap()
    }

    /// The folder holding object `name` of `prefix` (s3s-fs keeps one file per key).
    pub fn object_path(&self, prefix: &str, name: &str) -> PathBuf {
        self.dir.path().join(BUCKET).join(prefix).join(name)
    }

    /// The environment a `logbook` child needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
        ]
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.path().join("s3s-fs.log")).unwrap_or_default();
            let tail: String = log
                .chars()
                .rev()
                .take(3000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            eprintln!("--- s3s-fs log (tail) ---\n{tail}");
        }
    }
}
