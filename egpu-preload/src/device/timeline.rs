//! The `timeline` set's records, drained from the ring in shared memory while the program runs
//! (the merger drains the GPU's rings into it) into a [`Timeline`], which keeps their bytes in
//! fine bins and a sample of them, and put into the recording when the process exits.
//!
//! `EGPU_MEM_SAMPLE` (N, what the header says), `EGPU_MEM_MAX_RECORDS` (raw records kept) and
//! `EGPU_MEM_WINDOW_NS` (the windows' length; automatic without it) come from `egpu mem run`.

use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use egpu::host::mem::{Recording, Set, Timeline, windows};
use egpu::maps::RawMap;

/// The records drained so far; `None` until the drainer starts.
static TIMELINE: Mutex<Option<Timeline>> = Mutex::new(None);
/// The drainer, started once.
static DRAINER: OnceLock<()> = OnceLock::new();
/// How often the drainer empties the ring: often enough that a merge (every `EGPU_MERGE_MS`)
/// finds it empty.
const PERIOD: Duration = Duration::from_millis(5);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn new_timeline() -> Timeline {
    let keep = env_u64("EGPU_MEM_MAX_RECORDS").map_or(windows::KEEP, |n| n as usize);
    Timeline::new(env_u64("EGPU_MEM_SAMPLE").unwrap_or(32), keep)
}

/// The set's ring among the process's maps.
fn ring(maps: &[(String, RawMap)]) -> Option<&RawMap> {
    maps.iter().find(|(n, _)| n == Set::Timeline.map()).map(|(_, raw)| raw)
}

/// The lock, waited for at most a second (a child forked while the parent's drainer held it
/// finds it held for ever).
fn lock() -> Option<MutexGuard<'static, Option<Timeline>>> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match TIMELINE.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// Drains the ring into the timeline.
fn drain(ring: &RawMap) {
    if let Some(mut guard) = lock() {
        let timeline = guard.get_or_insert_with(new_timeline);
        let _ = timeline.drain(ring);
    }
}

/// Starts the drainer when the process records (`EGPU_MEM_OUT`) and runs the `timeline` set.
pub(super) fn start() {
    if std::env::var_os("EGPU_MEM_OUT").is_none() {
        return;
    }
    DRAINER.get_or_init(|| {
        let _ = std::thread::Builder::new().name("egpu-timeline".into()).spawn(|| {
            loop {
                std::thread::sleep(PERIOD);
                let Some(user) = crate::defaults::user() else { continue };
                let Some(raw) = ring(&user.maps) else { return };
                drain(raw);
            }
        });
    });
}

/// At exit, after the last merge: the rest of the ring drained, and the timeline's windows,
/// records and drops put in `recording`.
pub(super) fn finish(recording: &mut Recording, maps: &[(String, RawMap)]) {
    let Some(raw) = ring(maps) else { return };
    let Some(mut guard) = lock() else {
        eprintln!("egpu: the timeline's records were left out: their lock was held");
        return;
    };
    let timeline = guard.get_or_insert_with(new_timeline);
    let _ = timeline.drain(raw);
    let window = env_u64("EGPU_MEM_WINDOW_NS").filter(|&w| w > 0);
    timeline.finish_with_ring(recording, window, raw);
}
