//! The driver's own functions, behind the ones this library interposes.
//!
//! Each [`Hook`] keeps the real function of one entry point: the one `dlsym` or
//! `cuGetProcAddress` found when the program looked it up, or else the next definition after
//! this library (`dlsym(RTLD_NEXT, …)`), which is the driver's when the program links against
//! `libcuda.so.1`.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::CuResult;

/// `cuGetProcAddress`'s signature (CUDA 11).
pub(crate) type GetProcFn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
/// `cuGetProcAddress_v2`'s (CUDA 12).
pub(crate) type GetProcV2Fn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
/// `cuFuncGetName`'s.
pub(crate) type FuncGetNameFn = unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> CuResult;
/// `cuFuncGetAttribute`'s: the value, the attribute, the function.
pub(crate) type FuncGetAttributeFn =
    unsafe extern "C" fn(*mut c_int, c_int, *mut c_void) -> CuResult;
/// `dlsym`'s.
type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The real function of one entry point, of type `F` (an `extern "C"` function pointer).
///
/// A hook is one cache line, which a trampoline (`events::trampoline`) reads whole.
#[repr(C, align(64))]
pub(crate) struct Hook<F> {
    real: AtomicPtr<c_void>,
    /// Where the code of the object that holds `real` starts, and its length: a call from
    /// there is one the driver makes to itself (what the trampolines pass straight on, see
    /// [`Hook::holds_code_at`]). Zero, zero when unknown.
    code: AtomicUsize,
    code_len: AtomicUsize,
    name: &'static CStr,
    /// This library's function for the entry point (null: not interposed, only looked up).
    ours: fn() -> *mut c_void,
    _f: PhantomData<F>,
}

/// What lookups need of a hook, whatever its function's type.
pub(crate) trait Keep: Sync {
    /// See [`Hook::keep`].
    fn keep(&self, found: *mut c_void) -> *mut c_void;
    /// The entry point's name, which the real function is looked up by.
    #[cfg(test)]
    fn name(&self) -> &'static CStr;
    /// This library's function for the entry point.
    #[cfg(test)]
    fn ours(&self) -> *mut c_void;
}

impl<F: Copy + Sync> Keep for Hook<F> {
    fn keep(&self, found: *mut c_void) -> *mut c_void {
        Hook::keep(self, found)
    }
    #[cfg(test)]
    fn name(&self) -> &'static CStr {
        self.name
    }
    #[cfg(test)]
    fn ours(&self) -> *mut c_void {
        (self.ours)()
    }
}

/// Where a hook's fields are, whatever its `F` (`repr(C)`), for the trampolines
/// (`events::trampoline`).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl Hook<()> {
    pub(crate) const REAL: usize = std::mem::offset_of!(Hook<()>, real);
}

impl<F: Copy> Hook<F> {
    pub(crate) const fn new(name: &'static CStr, ours: fn() -> *mut c_void) -> Hook<F> {
        Hook {
            name,
            ours,
            real: AtomicPtr::new(std::ptr::null_mut()),
            code: AtomicUsize::new(0),
            code_len: AtomicUsize::new(0),
            _f: PhantomData,
        }
    }

    /// Whether `address` lies in the code of the object that holds the real function (a
    /// call from there is the driver calling itself).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[inline(always)]
    pub(crate) fn holds_code_at(&self, address: usize) -> bool {
        address.wrapping_sub(self.code.load(Ordering::Relaxed))
            < self.code_len.load(Ordering::Relaxed)
    }

    /// Makes `p` the real function, with the code around it.
    fn set(&self, p: *mut c_void) {
        if self.real.swap(p, Ordering::AcqRel) != p {
            let (start, len) = code_around(p as usize);
            // Read apart from `real`, and only as a hint: a call in the window between these
            // stores is judged by the old range.
            self.code_len.store(0, Ordering::Relaxed);
            self.code.store(start, Ordering::Relaxed);
            self.code_len.store(len, Ordering::Relaxed);
        }
    }

    /// Keeps `found` as the real function (unless it is this library's own, which a lookup
    /// through `RTLD_DEFAULT` finds first) and returns this library's function, to hand out.
    pub(crate) fn keep(&self, found: *mut c_void) -> *mut c_void {
        let ours = (self.ours)();
        if !found.is_null() && found != ours {
            self.set(found);
        }
        if ours.is_null() { found } else { ours }
    }

    /// The real function: the one kept, or the next definition after this library's.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<F> {
        let mut p = self.real.load(Ordering::Acquire);
        if p.is_null() {
            p = self.find();
            if p.is_null() {
                return None;
            }
        }
        const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
        // SAFETY: `p` is the address of the entry point `F` describes, from the dynamic linker
        // or the driver, and `F` is a function pointer of a pointer's size.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// Finds the real function the first time (out of line: the calls that follow need not
    /// carry its code).
    #[cold]
    #[inline(never)]
    fn find(&self) -> *mut c_void {
        let Some(real) = dlsym() else { return std::ptr::null_mut() };
        // SAFETY: the real dlsym, with a pseudo-handle and a C string.
        let mut p = unsafe { real(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() || p == (self.ours)() {
            // A library opened privately (`RTLD_LOCAL`, as Python extensions open theirs) is not
            // in the global scope that `RTLD_NEXT` searches.
            p = find_loaded(self.name, (self.ours)());
        }
        if !p.is_null() {
            self.set(p);
        }
        p
    }
}

fn none() -> *mut c_void {
    std::ptr::null_mut()
}

pub(crate) static GET_PROC: Hook<GetProcFn> =
    Hook::new(c"cuGetProcAddress", || crate::cuGetProcAddress as *mut c_void);
pub(crate) static GET_PROC_V2: Hook<GetProcV2Fn> =
    Hook::new(c"cuGetProcAddress_v2", || crate::cuGetProcAddress_v2 as *mut c_void);
pub(crate) static FUNC_GET_NAME: Hook<FuncGetNameFn> = Hook::new(c"cuFuncGetName", none);
/// `cuFuncGetAttribute`: the registers and local memory of the functions launched (`egpu mem`).
pub(crate) static FUNC_GET_ATTRIBUTE: Hook<FuncGetAttributeFn> =
    Hook::new(c"cuFuncGetAttribute", none);
/// `cuKernelGetName`: the runtime launches `CUkernel`s (of `cuLibraryLoad*`) as functions.
pub(crate) static KERNEL_GET_NAME: Hook<FuncGetNameFn> = Hook::new(c"cuKernelGetName", none);

impl<F: Copy> Hook<F> {
    /// The real function, found as [`get`](Self::get) finds it, or else by asking the driver's
    /// own `cuGetProcAddress` (when the program's driver was opened privately, `RTLD_NEXT` does
    /// not see it, but the runtime looked `cuGetProcAddress` up through this library).
    pub(crate) fn get_or_ask(&self) -> Option<F> {
        if let Some(f) = self.get() {
            return Some(f);
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        if let Some(ask) = GET_PROC_V2.kept() {
            let mut status = 0;
            // SAFETY: the driver's cuGetProcAddress_v2 with a C string and places to write.
            unsafe { ask(self.name.as_ptr(), &mut p, 12030, 0, &mut status) };
        } else if let Some(ask) = GET_PROC.kept() {
            // SAFETY: the driver's cuGetProcAddress with a C string and a place to write.
            unsafe { ask(self.name.as_ptr(), &mut p, 12030, 0) };
        }
        if p.is_null() {
            return None;
        }
        self.keep(p);
        self.get()
    }

    /// The real function if one was kept, without looking it up.
    fn kept(&self) -> Option<F> {
        let p = self.real.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
}

/// The real `dlsym` (this library defines its own): glibc 2.34 and later version it
/// `GLIBC_2.34`, earlier ones `GLIBC_2.2.5` (x86-64).
pub(crate) fn dlsym() -> Option<DlsymFn> {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Acquire);
    if p.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with a pseudo-handle and C strings.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: `p` is glibc's dlsym.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

/// Hands each loaded object to `visit` (the loader's `dl_iterate_phdr`), until it says `true`.
fn each_object<V: FnMut(&libc::dl_phdr_info) -> bool>(mut visit: V) {
    unsafe extern "C" fn call<V: FnMut(&libc::dl_phdr_info) -> bool>(
        info: *mut libc::dl_phdr_info,
        _: usize,
        visit: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader's information about one object, and the closure passed below.
        unsafe { c_int::from((*visit.cast::<V>())(&*info)) }
    }
    // SAFETY: `call` only hands the loader's information to `visit`.
    unsafe { libc::dl_iterate_phdr(Some(call::<V>), (&raw mut visit).cast()) };
}

/// The executable segment of the loaded object that holds `address`: its start and length, or
/// zeros.
pub(crate) fn code_around(address: usize) -> (usize, usize) {
    let mut found = (0, 0);
    each_object(|info| {
        if info.dlpi_phdr.is_null() {
            return false;
        }
        // SAFETY: the object's program headers, `dlpi_phnum` of them.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let code =
            headers.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0);
        for h in code {
            let start = (info.dlpi_addr as usize).wrapping_add(h.p_vaddr as usize);
            if address.wrapping_sub(start) < h.p_memsz as usize {
                found = (start, h.p_memsz as usize);
                return true;
            }
        }
        false
    });
    found
}

/// `name` as exported by any library loaded in the process other than this one (whose function
/// is `ours`), or null.
fn find_loaded(name: &CStr, ours: *mut c_void) -> *mut c_void {
    let Some(lookup) = dlsym() else { return std::ptr::null_mut() };
    let mut files: Vec<std::ffi::CString> = Vec::new();
    each_object(|info| {
        if !info.dlpi_name.is_null() {
            // SAFETY: the object's file name, NUL-terminated.
            let file = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !file.is_empty() {
                files.push(file.to_owned());
            }
        }
        false
    });
    for file in files {
        // SAFETY: a loaded object's file name; NOLOAD opens nothing new.
        let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: the real dlsym with a handle dlopen gave and a C string.
        let p = unsafe { lookup(handle, name.as_ptr()) };
        // SAFETY: the handle dlopen gave; the object stays loaded.
        unsafe { libc::dlclose(handle) };
        if !p.is_null() && p != ours {
            return p;
        }
    }
    std::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_around_a_function_is_its_objects_and_data_has_none() {
        let ours = code_around as *const () as usize;
        let (start, len) = code_around(ours);
        assert!(start <= ours && ours - start < len, "{ours:#x} outside {start:#x}+{len:#x}");
        // SAFETY: dlsym with a pseudo-handle and a C string.
        let libc = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) } as usize;
        let (other, other_len) = code_around(libc);
        assert!(other_len > 0 && libc - other < other_len);
        assert!(other + other_len <= start || start + len <= other, "two objects overlap");
        let data = 0u64;
        assert_eq!(code_around(&raw const data as usize), (0, 0));
        assert_eq!(code_around(0), (0, 0));
    }
}
