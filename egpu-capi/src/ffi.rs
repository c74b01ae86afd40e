//! What every entry point does with its arguments: pointers checked for null, slices and
//! strings made from pointers and lengths, structs read by the `size` their caller set, and
//! handles made, checked for their kind, and freed.

use std::ffi::{CStr, c_char};

use crate::error::{
    EGPU_BAD_ARGUMENT, EGPU_BAD_SIZE, EGPU_BUFFER_TOO_SMALL, EGPU_NULL_ARGUMENT, Result, fail,
};

/// The largest `size` a struct may claim: more says the field was never set.
const MAX_STRUCT: usize = 1 << 16;

/// `len` bytes at `ptr`: empty when `len` is 0 (`ptr` may then be null).
///
/// # Safety
/// When `len` is not 0 and `ptr` is not null, `ptr` is valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null with a length of {len}"));
    }
    if len > isize::MAX as usize {
        return fail(EGPU_BAD_SIZE, format!("`{what}`'s length {len} is not a length"));
    }
    // SAFETY: the caller's promise; not null, and the length fits in an isize.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `len` writable bytes at `ptr`, as [`bytes`].
///
/// # Safety
/// As for [`bytes`], for writes, and nothing else refers to the bytes meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize, what: &str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null with a length of {len}"));
    }
    if len > isize::MAX as usize {
        return fail(EGPU_BAD_SIZE, format!("`{what}`'s length {len} is not a length"));
    }
    // SAFETY: the caller's promise; not null, and the length fits in an isize.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The NUL-terminated UTF-8 string at `ptr`.
///
/// # Safety
/// `ptr` is null or points at a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null"));
    }
    // SAFETY: the caller's promise.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().or_else(|_| fail(EGPU_BAD_ARGUMENT, format!("`{what}` is not UTF-8")))
}

/// As [`text`], `None` for a null pointer.
///
/// # Safety
/// As for [`text`].
pub(crate) unsafe fn optional_text<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { text(ptr, what) }.map(Some)
}

/// A `#[repr(C)]` struct whose first field is `size: usize`, set by the caller to `sizeof`.
///
/// # Safety
/// The type is `#[repr(C)]`, starts with a `usize`, and every bit pattern of it is valid (or
/// its readers check the fields that may not be).
pub(crate) unsafe trait SizedStruct: Copy {
    /// The struct's name in C, for messages.
    const NAME: &'static str;
}

/// Reads the caller's struct at `ptr`: refused when null, or when its `size` is smaller than
/// this library's struct (a caller built against a newer header may pass a larger one: the
/// fields this library knows are read).
///
/// # Safety
/// `ptr` is null or valid for reads of the `size` bytes its first field says.
pub(crate) unsafe fn read<T: SizedStruct>(ptr: *const T, what: &str) -> Result<T> {
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null"));
    }
    // SAFETY: a struct of this family starts with its size (the caller's promise).
    let size = unsafe { ptr.cast::<usize>().read_unaligned() };
    check_size::<T>(size, what)?;
    // SAFETY: `size` bytes are readable, at least those of `T`, and every `T` is valid.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Writes `value` into the caller's struct at `ptr`, whose `size` the caller set: refused as
/// [`read`] refuses; the `size` field keeps the caller's value.
///
/// # Safety
/// `ptr` is null or valid for reads and writes of the `size` bytes its first field says.
pub(crate) unsafe fn write<T: SizedStruct>(ptr: *mut T, value: T, what: &str) -> Result<()> {
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null"));
    }
    // SAFETY: as in `read`.
    let size = unsafe { ptr.cast::<usize>().read_unaligned() };
    check_size::<T>(size, what)?;
    // SAFETY: `size` bytes are writable, at least those of `T`; the size is written back.
    unsafe {
        ptr.write_unaligned(value);
        ptr.cast::<usize>().write_unaligned(size);
    }
    Ok(())
}

fn check_size<T: SizedStruct>(size: usize, what: &str) -> Result<()> {
    let ours = size_of::<T>();
    if size < ours || size > MAX_STRUCT {
        return fail(
            EGPU_BAD_SIZE,
            format!(
                "`{what}->size` is {size}: set it to sizeof({}), which is {ours} bytes in this \
                 egpu",
                T::NAME
            ),
        );
    }
    Ok(())
}

/// Writes `value` through the out-pointer `out`.
///
/// # Safety
/// `out` is null or valid for a write of a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<()> {
    if out.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null"));
    }
    // SAFETY: the caller's promise.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Writes `value` through `out` when it is not null (an optional out-pointer).
///
/// # Safety
/// As for [`put`].
pub(crate) unsafe fn put_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller's promise.
        unsafe { out.write_unaligned(value) };
    }
}

/// Copies `text` and a NUL into the caller's buffer of `length` bytes; the length needed
/// (with the NUL) through `needed` when not null. [`EGPU_BUFFER_TOO_SMALL`] when it does not
/// fit (nothing but `needed` is written then).
///
/// # Safety
/// `buffer` is null or valid for writes of `length` bytes; `needed` is null or writable.
pub(crate) unsafe fn copy_text(
    text: &str,
    buffer: *mut c_char,
    length: usize,
    needed: *mut usize,
) -> Result<()> {
    let bytes = text.as_bytes();
    // SAFETY: the caller's promise.
    unsafe { put_optional(needed, bytes.len() + 1) };
    if length < bytes.len() + 1 {
        return fail(
            EGPU_BUFFER_TOO_SMALL,
            format!("the text is {} bytes with its NUL; the buffer has {length}", bytes.len() + 1),
        );
    }
    // SAFETY: the caller's promise for `length` bytes, at least `bytes.len() + 1`.
    let out = unsafe { bytes_mut(buffer.cast(), length, "buffer") }?;
    out[..bytes.len()].copy_from_slice(bytes);
    out[bytes.len()] = 0;
    Ok(())
}

/// The slice of `count` handles at `ptr` (null with a count of 0: none), each checked.
///
/// # Safety
/// `ptr` is null or valid for reads of `count` pointers, each null or a handle of this
/// library's that is not freed meanwhile.
pub(crate) unsafe fn handles<'a, T: Kind>(
    ptr: *const *const T::Opaque,
    count: usize,
    what: &str,
) -> Result<Vec<&'a T>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null with a count of {count}"));
    }
    if count > (1 << 20) {
        return fail(EGPU_BAD_SIZE, format!("`{what}`'s count {count} is not a count"));
    }
    // SAFETY: the caller's promise.
    let pointers = unsafe { std::slice::from_raw_parts(ptr, count) };
    pointers
        .iter()
        .enumerate()
        // SAFETY: each pointer is null or a live handle (the caller's promise).
        .map(|(i, &p)| unsafe { handle::<T>(p, &format!("{what}[{i}]")) })
        .collect()
}

/// A kind of handle: the Rust value behind an opaque C type.
pub(crate) trait Kind: Sized + 'static {
    /// The opaque type C sees.
    type Opaque;
    /// The handle's type in C, for messages.
    const NAME: &'static str;
    /// The tag at the start of each handle of this kind.
    const MAGIC: u64;
}

/// What a handle points at: a tag saying its kind (0 once freed), then the value.
#[repr(C)]
pub(crate) struct Tagged<T> {
    magic: u64,
    value: T,
}

/// A new handle of `value`, for the caller to free with its kind's `_free`.
pub(crate) fn new_handle<T: Kind>(value: T) -> *mut T::Opaque {
    Box::into_raw(Box::new(Tagged { magic: T::MAGIC, value })).cast()
}

/// Every kind's tag, for naming the kind of a handle passed in the wrong place.
pub(crate) const KINDS: [(u64, &str); 6] = [
    (0x6567_7075_5052_4f47, "egpu_program"),
    (0x6567_7075_4f42_4a53, "egpu_object"),
    (0x6567_7075_5f56_4d5f, "egpu_vm"),
    (0x6567_7075_5f4d_4150, "egpu_map"),
    (0x6567_7075_5052_4f42, "egpu_probes"),
    (0x6567_7075_5f50_5458, "egpu_ptx_result"),
];

/// The value behind handle `ptr`, checked for null and for its kind.
///
/// # Safety
/// `ptr` is null or a handle this library made that is not freed while the reference lives.
pub(crate) unsafe fn handle<'a, T: Kind>(ptr: *const T::Opaque, what: &str) -> Result<&'a T> {
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null"));
    }
    let tagged = ptr.cast::<Tagged<T>>();
    // SAFETY: every handle starts with its tag (the caller's promise that it is one).
    let magic = unsafe { (*tagged.cast::<Tagged<()>>()).magic };
    if magic != T::MAGIC {
        let is = KINDS.iter().find(|(m, _)| *m == magic).map_or("not a live handle", |(_, n)| n);
        return fail(EGPU_BAD_ARGUMENT, format!("`{what}` is not an {} ({is})", T::NAME));
    }
    // SAFETY: the tag says it is a `Tagged<T>`, alive (the caller's promise).
    Ok(unsafe { &(*tagged).value })
}

/// Frees handle `ptr` (nothing for null; a handle of another kind is left alone, with an error
/// kept as the thread's last).
///
/// # Safety
/// `ptr` is null or a handle this library made, not freed before and not used after.
pub(crate) unsafe fn free_handle<T: Kind>(ptr: *mut T::Opaque, what: &str) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: forwarded; checks the kind.
    unsafe { handle::<T>(ptr, what) }?;
    let tagged = ptr.cast::<Tagged<T>>();
    // SAFETY: a live `Tagged<T>` made by `new_handle` with `Box::into_raw`; its tag is cleared
    // first so a second free finds no handle (while the allocator has not reused the memory).
    unsafe {
        (*tagged).magic = 0;
        drop(Box::from_raw(tagged));
    }
    Ok(())
}

/// Takes a handle's value back out, freeing the handle (for handles that must be dropped with
/// care, such as a VM on its own thread).
///
/// # Safety
/// As for [`free_handle`]; `ptr` is not null and of kind `T` (checked by [`handle`] first).
pub(crate) unsafe fn take_handle<T: Kind>(ptr: *mut T::Opaque) -> T {
    let tagged = ptr.cast::<Tagged<T>>();
    // SAFETY: the caller's promise, as in `free_handle`.
    unsafe {
        (*tagged).magic = 0;
        Box::from_raw(tagged).value
    }
}

/// Refuses an enum-like number that is none of `valid`.
pub(crate) fn check_one_of(value: u32, valid: &[u32], what: &str) -> Result<()> {
    if valid.contains(&value) {
        return Ok(());
    }
    fail(EGPU_BAD_ARGUMENT, format!("{what} {value} is none of {valid:?}"))
}
