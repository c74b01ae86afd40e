//! Status codes, the calling thread's last error, and the guard every entry point runs its body
//! in (no panic crosses the boundary).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a call did: `EGPU_OK`, or why it failed. The message of the failure is the calling
/// thread's `egpu_last_error()`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum egpu_status {
    /// The call did what it says.
    EGPU_OK = 0,
    /// A pointer that must not be null was null.
    EGPU_NULL_ARGUMENT = 1,
    /// A struct's `size` is smaller than the struct this library knows, or a buffer or
    /// context has the wrong length.
    EGPU_BAD_SIZE = 2,
    /// An argument is out of its range: an unknown kind, event or attach point, text that is
    /// not UTF-8, a map declaration that does not parse, a handle used where it cannot be.
    EGPU_BAD_ARGUMENT = 3,
    /// The bytes are not a program: bytecode that does not decode or breaks the structural
    /// rules, assembly that does not assemble, an ELF object or a pack that cannot be read.
    EGPU_BAD_PROGRAM = 4,
    /// The verifier refused the program; the message names the instruction.
    EGPU_VERIFY = 5,
    /// The program does not load on the CPU VM or cannot be attached (a helper the CPU lacks,
    /// maps that do not fit its table, not a host attach point).
    EGPU_LOAD = 6,
    /// A run did not complete (a fault a helper or the interpreter caught, a short context).
    EGPU_RUN = 7,
    /// A map operation failed (a map that cannot exist, a full map, a shared object that
    /// cannot be made or opened, a key or value of the wrong size).
    EGPU_MAP = 8,
    /// The key, probe, program or map asked for is not there.
    EGPU_NOT_FOUND = 9,
    /// The caller's buffer is too small; the length needed was written where the function
    /// says.
    EGPU_BUFFER_TOO_SMALL = 10,
    /// A handle that belongs to one thread (a VM) was used on another.
    EGPU_WRONG_THREAD = 11,
    /// What the call needs is not in this process: the preloaded library
    /// (`libegpu_preload.so`) for CUDA events.
    EGPU_UNAVAILABLE = 12,
    /// A PTX module could not be instrumented.
    EGPU_PTX = 13,
    /// A file could not be read.
    EGPU_IO = 14,
    /// egpu panicked inside the call (a bug in egpu); the call had no effect it can vouch for.
    EGPU_PANIC = 15,
}

pub use egpu_status::*;

/// A failure: a status and its message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: egpu_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: egpu_status, message: impl Into<String>) -> Failure {
        Failure { status, message: message.into() }
    }
}

/// What an entry point's body returns.
pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// A failure of `status` with `message`.
pub(crate) fn fail<T>(status: egpu_status, message: impl Into<String>) -> Result<T> {
    Err(Failure::new(status, message))
}

thread_local! {
    /// The calling thread's last error message (empty after a call that succeeded).
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // A thread whose thread-locals are being destroyed keeps no message.
    let _ = LAST.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            *m = text;
        }
    });
}

/// Runs an entry point's body: clears the thread's last error, runs `body` catching any
/// panic, and turns its result into a status, keeping the message of a failure.
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> egpu_status {
    set_last("");
    let outcome = catch_unwind(AssertUnwindSafe(body));
    let failure = match outcome {
        Ok(Ok(())) => return EGPU_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            // Dropping the payload could panic in turn: it is forgotten instead.
            std::mem::forget(payload);
            Failure::new(EGPU_PANIC, format!("egpu panicked (a bug in egpu): {what}"))
        }
    };
    set_last(&failure.message);
    failure.status
}

/// Runs a body that returns a value rather than a status (a count, a pointer): `fallback` when
/// it fails or panics, with the message kept as [`guard`] keeps it.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> Result<T>) -> T {
    let mut value = None;
    let status = guard(|| {
        value = Some(body()?);
        Ok(())
    });
    match (status, value) {
        (EGPU_OK, Some(v)) => v,
        _ => fallback,
    }
}

/// The message of the calling thread's last failed call, as a NUL-terminated UTF-8 string
/// (empty when its last call succeeded). It stays valid until the thread's next call into this
/// library, and belongs to the library: do not free it. Never null.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_last_error() -> *const c_char {
    static EMPTY: &std::ffi::CStr = c"";
    let pointer = catch_unwind(|| {
        LAST.try_with(|m| m.try_borrow().map(|m| m.as_ptr()).unwrap_or(EMPTY.as_ptr()))
            .unwrap_or(EMPTY.as_ptr())
    });
    pointer.unwrap_or(EMPTY.as_ptr())
}

/// Copies the calling thread's last error message into `buffer` (`length` bytes), cut to fit
/// and always NUL-terminated when `length` is at least 1; the message's length without its
/// NUL, so a return value of `length` or more says it was cut. `buffer` may be null when
/// `length` is 0 (to ask for the length). Does not change the last error.
///
/// # Safety
/// `buffer` is null or valid for writes of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_last_error_copy(buffer: *mut c_char, length: usize) -> usize {
    let message = catch_unwind(|| {
        LAST.try_with(|m| m.try_borrow().map(|m| m.as_bytes().to_vec()).unwrap_or_default())
            .unwrap_or_default()
    })
    .unwrap_or_default();
    if !buffer.is_null() && length > 0 {
        let n = message.len().min(length - 1);
        // SAFETY: `buffer` is valid for `length` bytes (the caller's promise) and `n + 1` is
        // at most `length`; the message is our own, apart from the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(message.as_ptr(), buffer.cast::<u8>(), n);
            *buffer.add(n) = 0;
        }
    }
    message.len()
}

/// The name of a status code (`"EGPU_VERIFY"`), a static NUL-terminated string; `"EGPU_?"` for
/// a number that is none of them.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_status_name(status: i32) -> *const c_char {
    let name: &'static std::ffi::CStr = match status {
        0 => c"EGPU_OK",
        1 => c"EGPU_NULL_ARGUMENT",
        2 => c"EGPU_BAD_SIZE",
        3 => c"EGPU_BAD_ARGUMENT",
        4 => c"EGPU_BAD_PROGRAM",
        5 => c"EGPU_VERIFY",
        6 => c"EGPU_LOAD",
        7 => c"EGPU_RUN",
        8 => c"EGPU_MAP",
        9 => c"EGPU_NOT_FOUND",
        10 => c"EGPU_BUFFER_TOO_SMALL",
        11 => c"EGPU_WRONG_THREAD",
        12 => c"EGPU_UNAVAILABLE",
        13 => c"EGPU_PTX",
        14 => c"EGPU_IO",
        15 => c"EGPU_PANIC",
        _ => c"EGPU_?",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: egpu_last_error never returns null, and the string lives until this thread's
        // next call.
        unsafe { std::ffi::CStr::from_ptr(egpu_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_is_a_status_with_its_message() {
        let status = guard(|| panic!("on purpose"));
        assert_eq!(status, EGPU_PANIC);
        assert!(last().contains("on purpose"), "{}", last());
        assert_eq!(guard(|| Ok(())), EGPU_OK);
        assert_eq!(last(), "");
        assert_eq!(guard_value(7, || -> Result<i32> { panic!("again") }), 7);
        assert!(last().contains("again"));
    }

    #[test]
    fn the_message_copies_cut_to_fit() {
        assert_eq!(guard(|| fail(EGPU_MAP, "twelve chars")), EGPU_MAP);
        let mut buffer = [1 as c_char; 6];
        // SAFETY: six bytes.
        let n = unsafe { egpu_last_error_copy(buffer.as_mut_ptr(), buffer.len()) };
        assert_eq!(n, 12);
        let cut: Vec<u8> = buffer.iter().map(|&c| c as u8).collect();
        assert_eq!(&cut, b"twelv\0");
        // SAFETY: a null buffer with length 0 asks for the length only.
        assert_eq!(unsafe { egpu_last_error_copy(std::ptr::null_mut(), 0) }, 12);
        for code in 0..=15 {
            // SAFETY: static C strings.
            let name = unsafe { std::ffi::CStr::from_ptr(egpu_status_name(code)) };
            assert!(name.to_bytes().starts_with(b"EGPU_") && name.to_bytes().len() > 6);
        }
        // SAFETY: as above.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(egpu_status_name(99)) }, c"EGPU_?");
    }
}
