//! The launching thread's return addresses: by frame pointers from the frame the trampoline
//! handed over (a few loads per frame), or, where no trampoline saw the call (the runtime's
//! entry points, a thread's first call), by the system's unwinder (libgcc's
//! `_Unwind_Backtrace`, already in every process that runs Rust code), past this library's
//! frames.
//!
//! A frame pointer is followed only while it points into the thread's own stack, above the
//! stack pointer of the capture (memory the thread has in use, so mapped) and below the stack's
//! top, 8-byte aligned, and each one higher than the last: a bad frame pointer (a caller built
//! without frame pointers, using `rbp` for something else) ends the walk, never the program.

use std::ffi::{c_int, c_void};

/// The thread's stack: its lowest and highest address, asked once per thread.
pub(crate) fn bounds(local: &crate::Local) -> (usize, usize) {
    let known = local.attr.stack.get();
    if known.1 != 0 {
        return known;
    }
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
    // SAFETY: the calling thread's attributes, written into `attr`, read and destroyed.
    let found = unsafe {
        libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) == 0 && {
            let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size) == 0;
            libc::pthread_attr_destroy(attr.as_mut_ptr());
            ok
        }
    };
    let bounds = if found { (addr as usize, addr as usize + size) } else { (0, 0) };
    local.attr.stack.set(bounds);
    bounds
}

/// The address of the capture's own frame: the walk reads nothing below it.
#[inline(always)]
fn stack_pointer() -> usize {
    let here = 0u8;
    std::hint::black_box(&here) as *const u8 as usize
}

/// Writes the return addresses of the frames above the call into `out`, innermost first: `ret`
/// (where the call returns to), then those the chain of frame pointers from `fp` holds. Returns
/// how many.
pub(crate) fn walk(mut fp: usize, ret: usize, local: &crate::Local, out: &mut [u64]) -> usize {
    if out.is_empty() || ret == 0 {
        return 0;
    }
    let (_, top) = bounds(local);
    let low = stack_pointer();
    out[0] = ret as u64;
    let mut n = 1;
    while n < out.len() {
        if fp < low || top < 16 || fp > top - 16 || !fp.is_multiple_of(8) {
            break;
        }
        // SAFETY: `fp..fp + 16` lies in the thread's stack between the capture's frame and the
        // top, memory the thread has in use (checked above), aligned.
        let (next, ra) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        if ra == 0 {
            break;
        }
        out[n] = ra as u64;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// `_Unwind_Reason_Code`: go on, and stop.
const NO_REASON: c_int = 0;
const END_OF_STACK: c_int = 5;

unsafe extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(context: *mut c_void) -> usize;
}

/// What the unwinder's callback fills.
struct Unwound<'a> {
    out: &'a mut [u64],
    n: usize,
    /// This library's code: its frames are left out.
    ours: (usize, usize),
}

unsafe extern "C" fn each_frame(context: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Unwound` that `unwind` passed, alive for the call.
    let u = unsafe { &mut *arg.cast::<Unwound<'_>>() };
    // SAFETY: the unwinder's context for this frame.
    let ip = unsafe { _Unwind_GetIP(context) };
    if ip == 0 || u.n == u.out.len() {
        return END_OF_STACK;
    }
    if u.n == 0 && ip.wrapping_sub(u.ours.0) < u.ours.1 {
        return NO_REASON;
    }
    u.out[u.n] = ip as u64;
    u.n += 1;
    NO_REASON
}

/// Writes the return addresses above this library's frames into `out` by the unwinder,
/// innermost first; how many.
pub(crate) fn unwind(out: &mut [u64]) -> usize {
    static OURS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    let ours = *OURS.get_or_init(|| crate::real::code_around(unwind as *const () as usize));
    let mut u = Unwound { out, n: 0, ours };
    // SAFETY: the callback only reads the frames' addresses into `u`, which outlives the call.
    unsafe { _Unwind_Backtrace(each_frame, (&raw mut u).cast()) };
    u.n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up chain of frames in this thread's stack: followed while it is sound, and a
    /// frame pointer out of bounds, misaligned or going down ends the walk.
    #[test]
    fn frame_pointers_are_followed_only_inside_the_stack() {
        // SAFETY: all zeros is a valid `Local`.
        let local: crate::Local = unsafe { std::mem::zeroed() };
        let mut frames = [0usize; 8];
        let base = frames.as_mut_ptr() as usize;
        // frame 0 at base: next = base + 16, ra = 0x111; frame 1 at base + 16: next = base + 32,
        // ra = 0x222; frame 2 at base + 32: a pointer out of the stack.
        frames[0] = base + 16;
        frames[1] = 0x111;
        frames[2] = base + 32;
        frames[3] = 0x222;
        frames[4] = 8;
        frames[5] = 0x333;
        std::hint::black_box(&frames);
        let mut out = [0u64; 16];
        // The walk starts from a frame above its own: call it from here, `frames` is above.
        let n = walk(base, 0xaaa, &local, &mut out);
        assert_eq!(&out[..n], [0xaaa, 0x111, 0x222, 0x333]);
        frames[2] = base + 33;
        std::hint::black_box(&frames);
        assert_eq!(walk(base, 0xaaa, &local, &mut out), 3, "misaligned: stops");
        frames[2] = base;
        std::hint::black_box(&frames);
        assert_eq!(walk(base, 0xaaa, &local, &mut out), 3, "going down: stops");
        assert_eq!(walk(0xdead_0000, 0xaaa, &local, &mut out), 1, "out of the stack");
        assert_eq!(walk(base, 0xaaa, &local, &mut out[..2]), 2, "bounded depth");
    }

    /// In this test binary the library's code is the test's own, so the frames kept are those
    /// outside it: the thread's start, in the C library.
    #[test]
    fn the_unwinder_keeps_the_frames_outside_this_library() {
        let mut out = [0u64; 32];
        let n = unwind(&mut out);
        let ours = crate::real::code_around(unwind as *const () as usize);
        assert!(n >= 1, "{n} frames");
        assert!((out[0] as usize).wrapping_sub(ours.0) >= ours.1, "{:#x}", out[0]);
    }
}
