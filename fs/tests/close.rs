//! Alone in its own test binary so no other test opens descriptors meanwhile.
mod common;

fn inotify_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("inotify"))
        .count()
}

#[test]
fn close_releases_the_watch_at_once() {
    let t = tempfile::tempdir().expect("tempdir");
    let ws = common::ws(t.path(), &[], logbook_fs::ResolverMode::Auto);
    let before = inotify_fds();
    let watches: Vec<_> = (0..5)
        .map(|_| ws.watch(&logbook_fs::RelPath::root()).expect("watch"))
        .collect();
    assert_eq!(inotify_fds(), before + 5);
    for w in watches {
        w.close();
    }
    assert_eq!(inotify_fds(), before);
}
