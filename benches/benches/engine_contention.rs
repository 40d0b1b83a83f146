//! History pages while writers append durably to the same Session: the latency a reader sees
//! when the background index sync runs beside eight `Durability::Sync` writers.
//!
//! Criterion reports the mean of one page; the tail is what the index sync hurts, so the bench
//! also runs a plain timed loop of pages and prints their p50, p99 and maximum.
//! Run: `cargo bench -p logbook-benches --bench engine_contention -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use logbook_engine::*;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writer threads appending to the Session while pages are read.
const WRITERS: usize = 8;
/// Rows per page: the end of a conversation, as a client rereads it.
const PAGE_ROWS: u32 = 50;
/// Rows in the Session before the writers start.
const START_ROWS: usize = 2_000;
/// How long the plain timed loop reads pages.
const LATENCY_RUN: Duration = Duration::from_secs(3);
/// One page is asked for every this often, as a polling client does: a reader that asked
/// back to back would wait out a stall once and so hide how often pages meet one.
const PAGE_EVERY: Duration = Duration::from_micros(500);

fn event(i: u64) -> Event {
    Event::ModelCompletion(ModelCompletion {
        invocation: "inv-0".into(),
        model: "m".into(),
        items: vec![Item::Assistant {
            body: format!("row {i}: {}", "some text of an assistant answer ".repeat(8)),
            thinking: None,
        }],
        usage: None,
    })
}

fn last_page() -> HistoryParams {
    HistoryParams {
        session_id: "s".into(),
        through: None,
        after: None,
        limit: Some(PAGE_ROWS),
        anchor: None,
        direction: Some(Direction::Backward),
    }
}

/// A Root with Session `s` holding [`START_ROWS`] rows, appended in a few batches.
fn fixture(dir: &std::path::Path) -> Root {
    Root::init(dir).expect("init");
    let root = Root::open(dir).expect("open");
    root.create_session(CreateSessionParams {
        session_id: Some("s".into()),
        workspace: None,
        operation: "c".into(),
    })
    .expect("create");
    root.send(SendParams {
        session_id: "s".into(),
        operation: "send-0".into(),
        text: "start".into(),
        attachments: vec![],
    })
    .expect("send");
    for b in 0..(START_ROWS / 250) as u64 {
        root.append(AppendParams {
            session_id: "s".into(),
            operation: format!("fill-{b}"),
            events: (0..250).map(|i| event(b * 250 + i)).collect(),
        })
        .expect("fill");
    }
    root
}

/// Eight threads appending one event per durable batch until `stop`.
fn writers(
    root: &Arc<Root>,
    stop: &Arc<AtomicBool>,
    appended: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..WRITERS)
        .map(|w| {
            let (root, stop, appended) = (Arc::clone(root), Arc::clone(stop), Arc::clone(appended));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    root.append(AppendParams {
                        session_id: "s".into(),
                        operation: format!("w{w}-{n}"),
                        events: vec![event(n)],
                    })
                    .expect("append");
                    n += 1;
                }
                appended.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn history_under_writers(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Arc::new(fixture(&dir.path().join("root")));
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    let threads = writers(&root, &stop, &appended);

    // The tail first: a plain loop of pages, each timed.
    let mut lat = Vec::new();
    let started = Instant::now();
    let mut next = started;
    while started.elapsed() < LATENCY_RUN {
        next += PAGE_EVERY;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t = Instant::now();
        let page = root.history(last_page()).expect("page");
        lat.push(t.elapsed());
        black_box(page);
    }
    lat.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "engine/history_last50_under_{WRITERS}_sync_writers: {} pages (one per {:?}) in {:?}: \
         p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms, {} over 1 ms",
        lat.len(),
        PAGE_EVERY,
        LATENCY_RUN,
        ms(percentile(&lat, 0.50)),
        ms(percentile(&lat, 0.99)),
        ms(percentile(&lat, 0.999)),
        ms(lat[lat.len() - 1]),
        lat.iter()
            .filter(|d| **d > Duration::from_millis(1))
            .count(),
    );

    let mut g = c.benchmark_group(format!("engine/history_under_writers/last{PAGE_ROWS}"));
    g.sample_size(20);
    g.throughput(Throughput::Elements(u64::from(PAGE_ROWS)));
    g.bench_function(format!("{WRITERS}_sync_writers"), |b| {
        b.iter(|| black_box(root.history(last_page()).expect("page")))
    });
    g.finish();

    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "writers appended {} events in {secs:.1} s ({:.0}/s)",
        appended.load(Ordering::Relaxed),
        appended.load(Ordering::Relaxed) as f64 / secs
    );
}

criterion_group!(benches, history_under_writers);
criterion_main!(benches);
