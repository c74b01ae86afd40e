//! Launch sites and context tags (issue 28): what a launch, copy or allocation's context says
//! of where it comes from and which request or job it belongs to (`site_id`, `tag_id`,
//! `trace_id`, `span_id`).
//!
//! - **Tags** ([`tags`]): the thread's tag id and W3C trace context, which the program sets with
//!   the functions exported here (`egpu_tag_set`, `egpu_traceparent_set`, …; from Rust,
//!   `egpu::host::tags`; from Python, `python/egpu_tags.py`), copied into each context.
//! - **Sites** ([`sites`]): with `EGPU_SITES=N`, one call in `N` per thread takes its stack: the
//!   caller's return addresses by frame pointers from the frame the trampoline hands over
//!   ([`stack`]; where there is none, the system unwinder), and the innermost Python frames
//!   of a thread that runs Python, read from its own state, the GIL held or not ([`python`]),
//!   interned to a site id in the process's table
//!   (`egpu::host::sites::SiteTable`, in shared memory), symbolised only at exit.
//!
//! Nothing of this is on the way of a call while neither is on: one load of the flags in
//! [`defaults::HOT`](crate::defaults::HOT)'s line, which the call reads anyway, and a branch.

pub(crate) mod gpu_time;
pub(crate) mod python;
pub(crate) mod sites;
pub(crate) mod spans;
pub(crate) mod stack;
pub(crate) mod tags;

use std::cell::Cell;
use std::sync::atomic::Ordering;

use crate::defaults::HOT;
use crate::events::Attributed;

/// [`Hot::attribution`](crate::defaults::Hot): launch sites are captured.
pub(crate) const SITES: u8 = 1;
/// [`Hot::attribution`](crate::defaults::Hot): some thread set tags.
pub(crate) const TAGS: u8 = 2;

/// What a thread keeps for attribution, in its [`Local`](crate::Local) (all zeros at first).
#[repr(C)]
pub(crate) struct Attr {
    /// Tag id, trace id (high, low), span id.
    pub(crate) tags: Cell<[u64; 4]>,
    /// The caller's frame pointer and return address, as the trampoline saw them, for the call
    /// being observed (taken by the capture, so never seen twice).
    pub(crate) frame: Cell<(usize, usize)>,
    /// The thread's stack: its lowest and highest address (0, 0 until asked).
    pub(crate) stack: Cell<(usize, usize)>,
    /// Calls left before the next sampled one.
    pub(crate) countdown: Cell<u32>,
    /// The last site this thread interned: most loops launch from one place.
    pub(crate) last_site: Cell<u64>,
    /// The site of the call being observed (0: none), for its span ([`spans`]).
    pub(crate) call_site: Cell<u64>,
    /// Whether the thread is inside a launch whose span is being recorded ([`spans`]).
    pub(crate) in_span: Cell<bool>,
}

/// Fills `ctx`'s site and tags when either is on: a load and a branch otherwise.
#[inline(always)]
pub(crate) fn attribute<C: Attributed>(ctx: &mut C, local: &crate::Local) {
    let on = HOT.attribution.load(Ordering::Relaxed);
    if C::ATTRIBUTED && on != 0 {
        attribute_now(ctx, local, on);
    }
}

#[cold]
#[inline(never)]
fn attribute_now<C: Attributed>(ctx: &mut C, local: &crate::Local, on: u8) {
    let tags = if on & TAGS != 0 { local.attr.tags.get() } else { [0; 4] };
    let site = if on & SITES != 0 { sites::sampled(local) } else { 0 };
    local.attr.call_site.set(site);
    ctx.attribute(site, tags);
}

/// Keeps the caller's frame for the call about to be observed, when sites are captured: what
/// the trampoline saw (`rbp`, the return address).
#[inline(always)]
pub(crate) fn keep_frame(local: &crate::Local, frame: (usize, usize)) {
    if HOT.attribution.load(Ordering::Relaxed) & SITES != 0 {
        local.attr.frame.set(frame);
    }
}

/// Reads `EGPU_SITES` (`N`: one call in `N` per thread; unset or 0: off), `EGPU_SITES_DEPTH`
/// `EGPU_SITES_PYTHON` and `EGPU_TRACES` once, when the probes are set up.
pub(crate) fn configure() {
    sites::configure();
    spans::configure();
}
