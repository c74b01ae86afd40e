//! Context tags: which request or job the work a thread launches belongs to (issue 28).
//!
//! A thread's tags are a [`Tags`]: a 64-bit tag id of the program's choosing, and a W3C trace
//! context (a 128-bit trace id and the 64-bit id of the parent span). Every launch, copy and
//! allocation the thread makes carries them in its context (`tag_id`, `trace_id`, `span_id` of
//! [`LaunchCtx`](egpu_ebpf::LaunchCtx), [`MemcpyCtx`](egpu_ebpf::MemcpyCtx) and
//! [`AllocCtx`](egpu_ebpf::AllocCtx)), so host probes count a request's own launches and bytes.
//!
//! They are set from Rust with a scope guard ([`scope`], [`tag`], [`traceparent`]), which gives
//! the previous tags back when it is dropped; from C with the functions the preloaded library
//! exports (`egpu_tag_set`, `egpu_trace_set`, `egpu_traceparent_set`, `egpu_tags_get`,
//! `egpu_tags_put`: `include/egpu_tags.h`); from Python with `python/egpu_tags.py`, which calls
//! those through `ctypes`. A Rust program's guard sets both its own copy (what its in-process
//! launches, [`egpu_device::cuda::Gpu::launch`], carry) and, when the program runs under the
//! preloaded library (`egpu run`), the library's, found by `dlsym` at run time: without egpu
//! a guard costs a thread-local store.
//!
//! ```
//! use egpu_host::tags::{self, Tags};
//!
//! let outer = tags::tag(7);
//! {
//!     let _inner = tags::traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
//!         .expect("a W3C traceparent");
//!     let now = tags::current();
//!     assert_eq!(now.tag_id, 7, "a trace context keeps the tag id");
//!     assert_eq!(now.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
//!     assert_eq!(now.span_id, 0x00f067aa0ba902b7);
//! }
//! assert_eq!(tags::current(), Tags { tag_id: 7, ..Tags::NONE });
//! drop(outer);
//! assert_eq!(tags::current(), Tags::NONE);
//! ```

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::OnceLock;

/// A thread's tags: what the contexts' `tag_id`, `trace_id` and `span_id` carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tags {
    /// The request or job, 0 for none.
    pub tag_id: u64,
    /// The W3C trace id, 0 for none.
    pub trace_id: u128,
    /// The W3C parent span id, 0 for none.
    pub span_id: u64,
}

impl Tags {
    /// No tags.
    pub const NONE: Tags = Tags { tag_id: 0, trace_id: 0, span_id: 0 };

    /// The four words the contexts and the preloaded library's `egpu_tags_get` hold: the tag id,
    /// the trace id's high and low 64 bits, the span id.
    pub const fn words(self) -> [u64; 4] {
        [self.tag_id, (self.trace_id >> 64) as u64, self.trace_id as u64, self.span_id]
    }

    /// The tags of [`words`](Self::words).
    pub const fn from_words(w: [u64; 4]) -> Tags {
        Tags { tag_id: w[0], trace_id: (w[1] as u128) << 64 | w[2] as u128, span_id: w[3] }
    }

    /// These tags with the trace context of a W3C `traceparent` header
    /// (`00-<32 hex>-<16 hex>-<2 hex>`), its tag id kept.
    pub fn with_traceparent(self, header: &str) -> Result<Tags, TraceparentError> {
        let (trace_id, span_id) = parse_traceparent(header)?;
        Ok(Tags { trace_id, span_id, ..self })
    }
}

/// A `traceparent` header that is not W3C Trace Context's version 00 form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a W3C traceparent `{0}` (00-<32 hex digits, not all 0>-<16 hex digits, not all 0>-<2 hex \
     digits>)"
)]
pub struct TraceparentError(pub String);

/// The trace id and parent span id of a W3C `traceparent` header: version `00`, lower-case hex,
/// neither id all zeros (as the recommendation requires of a valid header).
///
/// ```
/// let (trace, span) = egpu_host::tags::parse_traceparent(
///     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
/// )
/// .expect("valid");
/// assert_eq!((trace, span), (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331));
/// assert!(egpu_host::tags::parse_traceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_err());
/// ```
pub fn parse_traceparent(header: &str) -> Result<(u128, u64), TraceparentError> {
    let err = || TraceparentError(header.to_string());
    let parts: Vec<&str> = header.trim().split('-').collect();
    let hex = |s: &str, n: usize| {
        (s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then_some(())
            .ok_or_else(err)
    };
    let [version, trace, span, flags] = parts.as_slice() else { return Err(err()) };
    hex(version, 2)?;
    hex(trace, 32)?;
    hex(span, 16)?;
    hex(flags, 2)?;
    if *version != "00" {
        return Err(err());
    }
    let trace = u128::from_str_radix(trace, 16).map_err(|_| err())?;
    let span = u64::from_str_radix(span, 16).map_err(|_| err())?;
    if trace == 0 || span == 0 {
        return Err(err());
    }
    Ok((trace, span))
}

thread_local! {
    /// This thread's tags, as this copy of egpu sees them (its in-process launches).
    static CURRENT: Cell<Tags> = const { Cell::new(Tags::NONE) };
}

/// The calling thread's tags.
pub fn current() -> Tags {
    CURRENT.try_with(Cell::get).unwrap_or_default()
}

/// Gives the thread's previous tags back when dropped (made by [`scope`]). Not `Send`: tags
/// belong to a thread.
#[must_use = "the tags last as long as the guard"]
#[derive(Debug)]
pub struct TagScope {
    previous: Tags,
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for TagScope {
    fn drop(&mut self) {
        put(self.previous);
    }
}

/// Sets the thread's tags to `tags` until the guard is dropped.
pub fn scope(tags: Tags) -> TagScope {
    let previous = current();
    put(tags);
    TagScope { previous, _thread: std::marker::PhantomData }
}

/// Sets the thread's tag id (its trace context kept) until the guard is dropped.
pub fn tag(tag_id: u64) -> TagScope {
    scope(Tags { tag_id, ..current() })
}

/// Sets the thread's trace context from a W3C `traceparent` header (its tag id kept) until the
/// guard is dropped.
pub fn traceparent(header: &str) -> Result<TagScope, TraceparentError> {
    Ok(scope(current().with_traceparent(header)?))
}

/// Writes `tags` as the thread's: here, and in the preloaded library when the process has it.
fn put(tags: Tags) {
    let _ = CURRENT.try_with(|c| c.set(tags));
    if let Some(put) = preloaded_put() {
        let words = tags.words();
        // SAFETY: the preloaded library's `egpu_tags_put`, which reads four words.
        unsafe { put(words.as_ptr()) };
    }
}

/// `egpu_tags_put`'s signature.
type PutFn = unsafe extern "C" fn(*const u64);

/// The preloaded library's `egpu_tags_put`, when this process has it (looked up once).
fn preloaded_put() -> Option<PutFn> {
    static PUT: OnceLock<usize> = OnceLock::new();
    let p = *PUT.get_or_init(|| {
        // SAFETY: a lookup in the global scope by a C string's name.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"egpu_tags_put".as_ptr()) as usize }
    });
    // SAFETY: a non-null address `dlsym` found for `egpu_tags_put`, of that signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<*mut c_void, PutFn>(p as *mut c_void) })
}

/// Fills the tag fields of `ctx` (a launch's context made in process) from the thread's tags.
pub(crate) fn fill_launch(ctx: &mut egpu_ebpf::LaunchCtx) {
    let t = current();
    if t != Tags::NONE {
        let w = t.words();
        (ctx.tag_id, ctx.trace_id, ctx.span_id) = (w[0], [w[1], w[2]], w[3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_give_the_previous_tags_back() {
        assert_eq!(current(), Tags::NONE);
        let a = tag(1);
        let b = tag(2);
        assert_eq!(current().tag_id, 2);
        drop(b);
        assert_eq!(current().tag_id, 1);
        drop(a);
        assert_eq!(current(), Tags::NONE);
        // Other threads see their own.
        let _c = tag(3);
        std::thread::spawn(|| assert_eq!(current(), Tags::NONE)).join().expect("joined");
    }

    #[test]
    fn traceparents_are_read_as_w3c_writes_them() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e47+6-00f067aa0ba902b7-01",
        ] {
            let e = parse_traceparent(bad).expect_err(bad);
            assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
        }
        let t = Tags { tag_id: 9, ..Tags::NONE }
            .with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(t.words(), [9, 0x4bf92f3577b34da6, 0xa3ce929d0e0e4736, 0x00f067aa0ba902b7]);
        assert_eq!(Tags::from_words(t.words()), t);
    }

    #[test]
    fn in_process_launches_carry_the_threads_tags() {
        let _t = scope(Tags { tag_id: 5, trace_id: 1 << 64 | 2, span_id: 3 });
        let mut ctx = egpu_ebpf::LaunchCtx::default();
        fill_launch(&mut ctx);
        assert_eq!((ctx.tag_id, ctx.trace_id, ctx.span_id), (5, [1, 2], 3));
    }
}
