//! The C functions that set a thread's tags (`include/egpu_tags.h`): a program finds them with
//! `dlsym(RTLD_DEFAULT, …)`, so it runs without egpu too.

use std::ffi::{CStr, c_char, c_int};
use std::sync::atomic::Ordering;

use egpu::host::tags::Tags;

use super::TAGS;
use crate::defaults::HOT;

/// Sets the thread's tags to `words` (tag id, trace id high and low, span id).
fn put(words: [u64; 4]) {
    if words != [0; 4] {
        HOT.attribution.fetch_or(TAGS, Ordering::Relaxed);
    }
    // A trace context, with spans on: launches take the whole way, where their spans are made.
    if words[1] | words[2] != 0 && super::spans::on() {
        crate::defaults::swap_launches();
    }
    crate::local().attr.tags.set(words);
}

/// Sets the calling thread's tag id (the request or job its launches, copies and allocations
/// belong to; 0 for none), its trace context kept; returns the previous tag id.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn egpu_tag_set(tag: u64) -> u64 {
    let mut words = crate::local().attr.tags.get();
    let previous = words[0];
    words[0] = tag;
    put(words);
    previous
}

/// Sets the calling thread's W3C trace context: the trace id's high and low 64 bits and the
/// parent span id (all 0: none), its tag id kept. Returns 0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn egpu_trace_set(trace_high: u64, trace_low: u64, span: u64) -> c_int {
    let words = crate::local().attr.tags.get();
    put([words[0], trace_high, trace_low, span]);
    0
}

/// Sets the calling thread's W3C trace context from a `traceparent` header
/// (`00-<32 hex>-<16 hex>-<2 hex>`), its tag id kept; null clears it. Returns 0, or -1 for a
/// header that is not one (the tags unchanged).
///
/// # Safety
///
/// `header` is null or a C string.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn egpu_traceparent_set(header: *const c_char) -> c_int {
    let words = crate::local().attr.tags.get();
    if header.is_null() {
        put([words[0], 0, 0, 0]);
        return 0;
    }
    // SAFETY: the caller's C string.
    let header = unsafe { CStr::from_ptr(header) }.to_string_lossy();
    match Tags::from_words(words).with_traceparent(&header) {
        Ok(tags) => {
            put(tags.words());
            0
        }
        Err(_) => -1,
    }
}

/// Writes the calling thread's tags to `out`: tag id, trace id high, trace id low, span id.
///
/// # Safety
///
/// `out` is null or points at four writable `u64`s.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn egpu_tags_get(out: *mut u64) {
    if !out.is_null() {
        // SAFETY: four words, as the caller promises.
        unsafe { out.cast::<[u64; 4]>().write_unaligned(crate::local().attr.tags.get()) };
    }
}

/// Sets the calling thread's tags to the four words at `words` (as [`egpu_tags_get`] writes
/// them): what a scope gives back when it ends. Null clears them.
///
/// # Safety
///
/// `words` is null or points at four readable `u64`s.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn egpu_tags_put(words: *const u64) {
    let words = if words.is_null() {
        [0; 4]
    } else {
        // SAFETY: four words, as the caller promises.
        unsafe { words.cast::<[u64; 4]>().read_unaligned() }
    };
    put(words);
}
