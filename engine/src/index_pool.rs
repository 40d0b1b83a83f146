//! The threads that build search postings in the background: one small pool for every
//! Session of every Root in the process, so that a Root of thousands of Sessions appended to
//! in turn costs at most [`threads_max`] threads, never one per Session.
//!
//! A task is a closure that must not wait for another task (the pool may have one thread):
//! the search index queues a Session's appended rows as one task that indexes everything
//! queued for that Session, and a finished segment's postings file as another. Threads start
//! when a task finds none idle (up to [`threads_max`]) and end after [`LINGER`] with nothing
//! to do. A task that panics is caught (its owner finds out through its own state) and the
//! thread goes on.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub(crate) type Task = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    tasks: VecDeque<Task>,
    threads: usize,
    /// Threads waiting for a task.
    idle: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    tasks: VecDeque::new(),
    threads: 0,
    idle: 0,
});
static READY: Condvar = Condvar::new();

/// How long a thread with nothing to do waits before it ends.
const LINGER: Duration = Duration::from_millis(500);

/// Threads at most: the machine's parallelism, from 1 to 4.
pub(crate) fn threads_max() -> usize {
    cores().clamp(1, 4)
}

/// The cores this process may run on, looked up once (1 when the system cannot say); every
/// thread count of the engine starts from it.
pub(crate) fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn lock() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Queues `task`. Gives it back when no thread runs and none can be started: the caller then
/// runs it itself.
pub(crate) fn submit(task: Task) -> Result<(), Task> {
    let mut pool = lock();
    pool.tasks.push_back(task);
    if pool.idle > 0 {
        READY.notify_one();
        return Ok(());
    }
    if pool.threads >= threads_max() {
        // A running thread takes it when it is done with the tasks before it.
        return Ok(());
    }
    let spawned = std::thread::Builder::new()
        .name("logbook-index".into())
        .spawn(run);
    match spawned {
        Ok(_) => {
            pool.threads += 1;
            Ok(())
        }
        Err(_) if pool.threads == 0 => Err(pool.tasks.pop_back().expect("queued above")),
        Err(_) => Ok(()),
    }
}

fn run() {
    let mut pool = lock();
    loop {
        if let Some(task) = pool.tasks.pop_front() {
            drop(pool);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
            pool = lock();
            continue;
        }
        pool.idle += 1;
        let (guard, waited) = READY
            .wait_timeout(pool, LINGER)
            .unwrap_or_else(|p| p.into_inner());
        pool = guard;
        pool.idle -= 1;
        // Under the lock: a task queued after this sees one thread fewer and starts one.
        if waited.timed_out() && pool.tasks.is_empty() {
            pool.threads -= 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn every_task_runs_and_a_panic_stops_none() {
        let (tx, rx) = mpsc::channel();
        submit(Box::new(|| panic!("injected: a task that panics"))).unwrap_or_else(|t| t());
        for i in 0..64 {
            let tx = tx.clone();
            submit(Box::new(move || tx.send(i).expect("send"))).unwrap_or_else(|t| t());
        }
        let mut got: Vec<i32> = (0..64).map(|_| rx.recv().expect("a task ran")).collect();
        got.sort_unstable();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
        assert!(lock().threads <= threads_max());
    }
}
