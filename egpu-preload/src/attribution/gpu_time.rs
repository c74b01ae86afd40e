//! GPU time per call site and per tag (issue 28): each launch the kernel times' events timed
//! (`EGPU_KERNEL_TIMES`) adds its GPU nanoseconds, at the harvest, to the process's maps by site
//! and by tag (`egpu::host::gpu_time::GpuTimes`, in shared memory, bounded). With
//! `EGPU_GPU_TIME=BASE` (which `egpu run --gpu-time-report` sets), at exit, before the maps are
//! removed, the process writes them to `BASE.<pid>` with each site's frames named here, where
//! `dladdr` and the loaded objects are at hand (`egpu run` reads the files once the command
//! ends, when the processes and their shared objects are gone):
//!
//! ```text
//! site ID NS LAUNCHES FRAME;FRAME;…   (outermost first; none for a launch without a site)
//! tag ID NS LAUNCHES
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use egpu::host::gpu_time::{GpuTimes, OTHER};

use crate::defaults::HOT;

/// The process's maps (remade in a child of `fork`: its pid), `None` when they cannot be made.
static MAPS: Mutex<Option<(u32, Option<&'static GpuTimes>)>> = Mutex::new(None);

/// The site (0 when sites are off or this call was not sampled) and tag of the launch this
/// thread is making, read on its way (attributed already).
pub(crate) fn launch_keys() -> (u64, u64) {
    let local = crate::local();
    let on = HOT.attribution.load(Ordering::Relaxed);
    let site = if on & super::SITES != 0 { local.attr.call_site.get() } else { 0 };
    let tag = if on & super::TAGS != 0 { local.attr.tags.get()[0] } else { 0 };
    (site, tag)
}

/// Adds harvested launches, each `(site, tag, ns)`.
pub(crate) fn add(launches: impl Iterator<Item = (u64, u64, u64)>) {
    let Some(maps) = maps() else { return };
    for (site, tag, ns) in launches {
        maps.add(site, tag, ns);
    }
}

/// The process's maps, made at the first harvest.
fn maps() -> Option<&'static GpuTimes> {
    let pid = std::process::id();
    let mut maps = MAPS.lock().unwrap_or_else(|p| p.into_inner());
    match *maps {
        Some((p, m)) if p == pid => m,
        _ => {
            let shared = std::env::var_os("EGPU_SHARED").is_none_or(|v| v != "0");
            // Never dropped: a parent's, in a child, would remove the parent's objects.
            let made = GpuTimes::create(pid, shared).ok().map(|m| &*Box::leak(Box::new(m)));
            *maps = Some((pid, made));
            made
        }
    }
}

/// At exit, with `EGPU_GPU_TIME=BASE`: writes the maps to `BASE.<pid>` (see the module
/// documentation); nothing when no launch was timed.
pub(crate) fn write() {
    let Some(base) = std::env::var_os("EGPU_GPU_TIME") else { return };
    let pid = std::process::id();
    let Some(maps) = *MAPS.lock().unwrap_or_else(|p| p.into_inner()) else { return };
    let Some(maps) = maps.1.filter(|_| maps.0 == pid) else { return };
    let (sites, tags) = maps.entries();
    let frames = super::sites::frames();
    let mut text = String::new();
    for (site, time) in sites {
        let stack = match frames.iter().find(|(id, _)| *id == site) {
            Some((_, names)) => names.iter().rev().cloned().collect::<Vec<_>>().join(";"),
            None if site == OTHER => "[other sites]".into(),
            None => "[no site]".into(),
        };
        let _ = writeln!(text, "site {site} {} {} {stack}", time.ns, time.launches);
    }
    for (tag, time) in tags {
        let _ = writeln!(text, "tag {tag} {} {}", time.ns, time.launches);
    }
    let mut path = base;
    path.push(format!(".{pid}"));
    if let Ok(mut file) = std::fs::File::create(&path) {
        let _ = file.write_all(text.as_bytes());
    }
}
