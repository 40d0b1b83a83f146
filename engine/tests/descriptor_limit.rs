//! `raise_descriptor_limit` lifts the soft `RLIMIT_NOFILE` to the hard one (its own process:
//! the limit is the process's).
use logbook_engine::{
    open_sessions_budget, raise_descriptor_limit, DESCRIPTORS_RESERVED, OPEN_SESSIONS_MAX,
    SESSION_DESCRIPTORS,
};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

#[test]
fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
    let start = getrlimit(Resource::Nofile);
    let hard = start.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if hard < 512 {
        eprintln!("hard limit {hard}: too low to lower the soft one under it");
        return;
    }
    let lowered = Rlimit {
        current: Some(300),
        maximum: start.maximum,
    };
    setrlimit(Resource::Nofile, lowered).expect("lower the soft limit");
    let budget = |limit: u64| {
        ((limit - DESCRIPTORS_RESERVED) / SESSION_DESCRIPTORS).min(OPEN_SESSIONS_MAX as u64)
            as usize
    };
    assert_eq!(open_sessions_budget(), budget(300));
    assert_eq!(raise_descriptor_limit(), hard);
    let now = getrlimit(Resource::Nofile);
    assert_eq!(now.current, Some(hard));
    assert_eq!(now.maximum, start.maximum, "the hard limit is left alone");
    assert_eq!(
        open_sessions_budget(),
        budget(hard),
        "the cache grew with the limit"
    );
    // Raised already: nothing to do, and it says so.
    assert_eq!(raise_descriptor_limit(), hard);
}
