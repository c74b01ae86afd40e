//! `egpu run`'s metrics: the processes it watches ([`Descendants`]), egpu's own health beside
//! their counts ([`Exporter`]), and the exporters, which run here in the command and never in the
//! preloaded library: Prometheus's formats served over HTTP (`prometheus.rs`, `serve.rs`:
//! `prometheus-client`, `tiny_http`) and OTLP pushes (`otlp.rs`, the `otlp` feature: JSON from
//! `egpu-host`, protobuf with `prost`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use egpu::host::builtin::{self, Builtin, MetricsOptions};
use egpu::host::spans::{SpanRecord, SpanRing};

#[cfg(test)]
mod fixture;
#[cfg(feature = "otlp")]
pub(crate) mod otlp;
mod prometheus;
mod serve;

pub(crate) use serve::serve;

/// The built-in maps of this process's descendants, each opened when first seen and kept
/// mapped, so that a process that exits keeps its final counts here (it removes its shared
/// objects' names, not the memory mapped here) for the metrics served and pushed; with
/// [`Descendants::with_spans`], their span rings too, opened at the same time for the same
/// reason (a process whose life is shorter than a push's period still has its spans pushed).
#[derive(Clone)]
pub(crate) struct Descendants {
    me: u32,
    seen: Arc<Mutex<BTreeMap<u32, Builtin>>>,
    /// The span rings, when spans are wanted.
    rings: Option<Arc<Mutex<BTreeMap<u32, SpanRing>>>>,
}

impl Descendants {
    pub(crate) fn new() -> Descendants {
        Descendants { me: std::process::id(), seen: Default::default(), rings: None }
    }

    /// The same, opening each descendant's span ring as well.
    pub(crate) fn with_spans(self) -> Descendants {
        Descendants { rings: Some(Default::default()), ..self }
    }

    /// Opens the maps of descendants not seen before, and the span rings not open yet (a
    /// process makes its ring before its maps, a child of `fork` at its first span).
    fn refresh(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // A descendant, or one that has ended with its objects kept for this process.
        let kept = builtin::kept::kept_for(self.me);
        for pid in builtin::processes() {
            if !seen.contains_key(&pid)
                && (descends_from(pid, self.me) || kept.contains(&pid))
                && let Ok(maps) = Builtin::open(pid)
            {
                seen.insert(pid, maps);
            }
        }
        if let Some(rings) = &self.rings {
            let mut rings = rings.lock().unwrap_or_else(|p| p.into_inner());
            for &pid in seen.keys() {
                if !rings.contains_key(&pid)
                    && let Ok(ring) = SpanRing::open(pid)
                {
                    rings.insert(pid, ring);
                }
            }
        }
    }

    /// The spans each descendant wrote since the last call, after a refresh; none without
    /// [`Descendants::with_spans`].
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub(crate) fn take_spans(&self) -> Vec<(Builtin, Vec<SpanRecord>)> {
        self.refresh();
        let Some(rings) = &self.rings else { return Vec::new() };
        let rings = rings.lock().unwrap_or_else(|p| p.into_inner());
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let drained = rings.iter().filter_map(|(pid, ring)| Some((seen.get(pid)?, ring.drain())));
        drained.filter(|(_, spans)| !spans.is_empty()).map(|(b, s)| (b.clone(), s)).collect()
    }

    /// Every descendant seen so far, after a refresh.
    pub(crate) fn snapshot(&self) -> Vec<Builtin> {
        self.refresh();
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// The environment that has this process's descendants leave their objects at exit for it
    /// (`egpu::host::builtin::kept`), so that one shorter than its looks is seen too.
    pub(crate) fn keep_env(&self) -> (&'static str, String) {
        (builtin::kept::KEEP_FOR, self.me.to_string())
    }

    /// Removes the objects the descendants kept for this process, once it has read them.
    pub(crate) fn remove_kept(&self) {
        for pid in builtin::kept::kept_for(self.me) {
            builtin::unlink(pid);
        }
    }

    /// Looks for new descendants every 100 ms, from a thread of its own, so that short-lived
    /// ones are seen before they exit.
    pub(crate) fn watch(&self) {
        let me = self.clone();
        std::thread::spawn(move || {
            loop {
                me.refresh();
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
}

/// What the metrics endpoint serves: the descendants' counts and egpu's own health, which is
/// there from the first scrape on (before any CUDA process appears) and after the command ends.
#[derive(Debug)]
pub(crate) struct Exporter {
    descendants: Descendants,
    options: MetricsOptions,
    /// When `egpu run` started.
    started: SystemTime,
    /// Scrapes served, the one under way included.
    scrapes: AtomicU64,
    /// The command's exit status once it has ended; [`RUNNING`] until then.
    exit: AtomicI64,
}

/// [`Exporter::exit`] while the command runs.
const RUNNING: i64 = i64::MIN;

impl std::fmt::Debug for Descendants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descendants").field("me", &self.me).finish_non_exhaustive()
    }
}

impl Exporter {
    pub(crate) fn new(descendants: Descendants, options: MetricsOptions) -> Arc<Exporter> {
        Arc::new(Exporter {
            descendants,
            options,
            started: SystemTime::now(),
            scrapes: AtomicU64::new(0),
            exit: AtomicI64::new(RUNNING),
        })
    }

    /// The command ended with `status` (what `egpu run` exits with).
    pub(crate) fn command_ended(&self, status: i32) {
        self.exit.store(i64::from(status), Ordering::Relaxed);
    }

    /// Counts a scrape; returns what to serve: the processes and egpu's health now.
    fn scrape(&self) -> (Vec<Builtin>, Health) {
        let scrapes = self.scrapes.fetch_add(1, Ordering::Relaxed) + 1;
        let processes = self.descendants.snapshot();
        let running = processes
            .iter()
            .filter(|b| std::path::Path::new(&format!("/proc/{}", b.pid)).exists())
            .count() as u64;
        let exit = self.exit.load(Ordering::Relaxed);
        let health = Health {
            started: self.started.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default(),
            scrapes,
            seen: processes.len() as u64,
            running,
            exit: (exit != RUNNING).then_some(exit),
        };
        (processes, health)
    }
}

/// egpu's own series, as the served metrics begin with them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Health {
    /// When `egpu run` started, since the Unix epoch.
    started: Duration,
    /// Scrapes served, this one included.
    scrapes: u64,
    /// Processes whose egpu maps were found, since the start.
    seen: u64,
    /// Those of them still running.
    running: u64,
    /// The command's exit status, once it has ended.
    exit: Option<i64>,
}

/// Whether process `pid` is `ancestor` or one of its descendants (from `/proc/<pid>/stat`).
pub(crate) fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // The parent is the second field after the command, which is in parentheses.
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let Some(Ok(parent)) = parent.map(str::parse) else { return false };
        pid = parent;
    }
    false
}
