//! Libraries whose instrumentation waits for a context: one loaded when no context is current
//! (the CUDA runtime's eager loading, `CUDA_MODULE_LOADING=EAGER`, loads every library before it
//! makes a context current), or on a machine with more than one device (a library belongs to no
//! context, and its kernels run in every context that uses them, where one context's map parts
//! are not to be reached from another's).
//!
//! Such a library is loaded as it came, and its PTX kept. Where the program then finds a kernel
//! in the current context, it gets the kernel of the library's PTX instrumented and loaded as a
//! module in that context (once per library and context), bound to the context's map parts:
//! `cuLibraryGetModule` gives the module, `cuKernelGetFunction` its function, and a launch of
//! a library's kernel handle (`cuLaunchKernel` takes a `CUkernel` as its function) launches its
//! function in the launching context ([`launched`]). `cuLibraryGetKernel` records which library
//! and name a kernel handle stands for. What the program sets on a kernel handle
//! (`cuKernelSetAttribute`, `cuKernelSetCacheConfig`: a larger dynamic shared memory, say) is
//! set on its instrumented functions too ([`set`]), and its library's globals are the module's
//! (`cuLibraryGetGlobal`, `cuLibraryGetManaged`: [`global`]), so that the program and the
//! kernels it runs see the same variables.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::parts;
use crate::real::Hook;
use crate::{CuResult, Handle, defaults};

type GetFunctionFn = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult;
static MODULE_GET_FUNCTION: Hook<GetFunctionFn> =
    Hook::new(c"cuModuleGetFunction", std::ptr::null_mut);
type CountFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
static DEVICE_COUNT: Hook<CountFn> = Hook::new(c"cuDeviceGetCount", std::ptr::null_mut);
type GetGlobalFn = unsafe extern "C" fn(*mut u64, *mut usize, Handle, *const c_char) -> CuResult;
static MODULE_GET_GLOBAL: Hook<GetGlobalFn> =
    Hook::new(c"cuModuleGetGlobal_v2", std::ptr::null_mut);
type SetAttributeFn = unsafe extern "C" fn(Handle, c_int, c_int) -> CuResult;
static FUNC_SET_ATTRIBUTE: Hook<SetAttributeFn> =
    Hook::new(c"cuFuncSetAttribute", std::ptr::null_mut);
type SetCacheFn = unsafe extern "C" fn(Handle, c_int) -> CuResult;
static FUNC_SET_CACHE: Hook<SetCacheFn> = Hook::new(c"cuFuncSetCacheConfig", std::ptr::null_mut);

/// What a program set on a kernel handle, to be set on its instrumented functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    /// `cuKernelSetAttribute(attribute, value, ...)`.
    Attribute(c_int, c_int),
    /// `cuKernelSetCacheConfig(..., config, ...)`.
    CacheConfig(c_int),
}

impl Setting {
    /// Whether `other` replaces this one (the same attribute, or a cache config).
    fn same_kind(self, other: Setting) -> bool {
        match (self, other) {
            (Setting::Attribute(a, _), Setting::Attribute(b, _)) => a == b,
            (Setting::CacheConfig(_), Setting::CacheConfig(_)) => true,
            _ => false,
        }
    }

    /// Sets it on function `f`.
    fn apply(self, f: Handle) {
        match self {
            Setting::Attribute(attribute, value) => {
                if let Some(set) = FUNC_SET_ATTRIBUTE.get_or_ask() {
                    // SAFETY: a function egpu made, and the program's attribute and value.
                    unsafe { set(f, attribute, value) };
                }
            }
            Setting::CacheConfig(config) => {
                if let Some(set) = FUNC_SET_CACHE.get_or_ask() {
                    // SAFETY: a function egpu made, and the program's configuration.
                    unsafe { set(f, config) };
                }
            }
        }
    }
}

/// Whether any library waits: the launches' check, before the lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// A library whose instrumentation waits for contexts.
struct Library {
    handle: usize,
    ptx: String,
    /// Per context: the instrumented module (0: it could not be made there).
    modules: Vec<(usize, usize)>,
}

#[derive(Default)]
struct State {
    libraries: Vec<Library>,
    /// Kernel handles: the index of each one's library, and its name.
    kernels: HashMap<usize, (usize, CString)>,
    /// Functions made, by kernel handle and context.
    functions: HashMap<(usize, usize), usize>,
    /// What the program set on kernel handles, in order.
    settings: HashMap<usize, Vec<Setting>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a library loaded now waits for a context: none is current, or the machine has more
/// than one device.
pub(crate) fn waits() -> bool {
    if parts::current_context().is_none() {
        return true;
    }
    let Some(count) = DEVICE_COUNT.get_or_ask() else { return true };
    let mut n: c_int = 0;
    // SAFETY: the driver writes one count.
    unsafe { count(&mut n) != 0 || n > 1 }
}

/// Library `handle`, just loaded as it came, waits for contexts with its PTX.
pub(crate) fn defer(handle: Handle, ptx: String) {
    if handle.is_null() {
        return;
    }
    let mut state = lock();
    let state = state.get_or_insert_with(State::default);
    // Kernels name their library by index: entries are never removed (an unloaded one is
    // emptied), and a live handle is never loaded twice.
    state.libraries.push(Library { handle: handle as usize, ptx, modules: Vec::new() });
    ANY.store(true, Ordering::Release);
    // Launches of its kernel handles must reach [`launched`]: the trampolines' way.
    defaults::swap_launches();
}

/// After `cuLibraryGetKernel` gave `kernel` for `name` in `library`: remembered when the library
/// waits.
pub(crate) fn found(kernel: Handle, library: Handle, name: *const c_char) {
    if !ANY.load(Ordering::Acquire) || name.is_null() {
        return;
    }
    let mut state = lock();
    let Some(state) = state.as_mut() else { return };
    let Some(index) = state.libraries.iter().position(|l| l.handle == library as usize) else {
        return;
    };
    // SAFETY: the caller's NUL-terminated name, which the driver just read.
    let name = unsafe { CStr::from_ptr(name) }.to_owned();
    state.kernels.insert(kernel as usize, (index, name));
}

/// Library `library` forgotten (the program unloads it), and the modules made of it unloaded.
pub(crate) fn unloaded(library: Handle) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let modules = forget(library);
    if let Some(unload) = crate::events::MODULE_UNLOAD.get_or_ask() {
        for module in modules {
            // SAFETY: a module this library loaded, unloaded once (forgotten above).
            unsafe { unload(module as Handle) };
        }
    }
}

/// Forgets `library`: the modules made of it.
fn forget(library: Handle) -> Vec<usize> {
    let mut state = lock();
    let Some(state) = state.as_mut() else { return Vec::new() };
    let mut modules = Vec::new();
    if let Some(index) = state.libraries.iter().position(|l| l.handle == library as usize) {
        // Its kernels' handles go too; the indices of the libraries after it stay (the entry
        // stays, emptied), so that the other kernels still name theirs.
        let l = &mut state.libraries[index];
        l.handle = 0;
        l.ptx = String::new();
        modules = l.modules.drain(..).map(|(_, m)| m).filter(|&m| m != 0).collect();
        state.kernels.retain(|_, k| k.0 != index);
        let kernels = &state.kernels;
        state.functions.retain(|f, _| kernels.contains_key(&f.0));
        state.settings.retain(|k, _| kernels.contains_key(k));
    }
    modules
}

/// The module of `library` instrumented in the current context, when the library waits.
pub(crate) fn module(library: Handle) -> Option<Handle> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let context = parts::current_context()?;
    let mut state = lock();
    let state = state.as_mut()?;
    let index = state.libraries.iter().position(|l| l.handle == library as usize)?;
    module_in(state, index, context)
}

/// The function of kernel handle `kernel` instrumented in the current context, when its library
/// waits.
pub(crate) fn function(kernel: Handle) -> Option<Handle> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let mut state = lock();
    let state = state.as_mut()?;
    // Most launches are of functions, not of a waiting library's kernel handles.
    let (index, name) = state.kernels.get(&(kernel as usize)).cloned()?;
    let context = parts::current_context()? as usize;
    let key = (kernel as usize, context);
    if let Some(&f) = state.functions.get(&key) {
        return Some(f as Handle);
    }
    let module = module_in(state, index, context as Handle)?;
    let get = MODULE_GET_FUNCTION.get_or_ask()?;
    let mut f: Handle = std::ptr::null_mut();
    // SAFETY: the driver writes one handle, for a name in a module it loaded.
    if unsafe { get(&mut f, module, name.as_ptr()) } != 0 || f.is_null() {
        return None;
    }
    for setting in state.settings.get(&key.0).into_iter().flatten() {
        setting.apply(f);
    }
    state.functions.insert(key, f as usize);
    // Its launches' device (`events::functions`): the current context's.
    crate::events::functions::found(f);
    Some(f)
}

/// After the program set `setting` on kernel handle `kernel`: set on its instrumented
/// functions, made and to be made, when its library waits.
pub(crate) fn set(kernel: Handle, setting: Setting) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let mut state = lock();
    let Some(state) = state.as_mut() else { return };
    if !state.kernels.contains_key(&(kernel as usize)) {
        return;
    }
    let settings = state.settings.entry(kernel as usize).or_default();
    settings.retain(|s| !s.same_kind(setting));
    settings.push(setting);
    for (_, &f) in state.functions.iter().filter(|((k, _), _)| *k == kernel as usize) {
        setting.apply(f as Handle);
    }
}

/// A global (or managed) variable `name` of `library`, when the library waits: the one of its
/// instrumented module in the current context, whose kernels the program runs
/// (`cuModuleGetGlobal`'s result); `None` to ask the driver for the library's.
pub(crate) fn global(
    address: *mut u64,
    bytes: *mut usize,
    library: Handle,
    name: *const c_char,
) -> Option<CuResult> {
    let module = module(library)?;
    let get = MODULE_GET_GLOBAL.get_or_ask()?;
    // SAFETY: the caller's places for the address and size (each may be null, as the driver
    // allows) and name, and a module egpu loaded.
    Some(unsafe { get(address, bytes, module, name) })
}

/// The function a launch of `f` runs: `f`'s instrumented function in the current context when
/// `f` is a waiting library's kernel handle, else `f`.
#[inline]
pub(crate) fn launched(f: Handle) -> Handle {
    if !ANY.load(Ordering::Relaxed) {
        return f;
    }
    function(f).unwrap_or(f)
}

/// Library `index`'s instrumented module in `context` (current), made the first time.
fn module_in(state: &mut State, index: usize, context: Handle) -> Option<Handle> {
    let library = &mut state.libraries[index];
    if library.handle == 0 {
        return None;
    }
    if let Some(&(_, m)) = library.modules.iter().find(|m| m.0 == context as usize) {
        return (m != 0).then_some(m as Handle);
    }
    let made = load_instrumented(&library.ptx);
    library.modules.push((context as usize, made.map_or(0, |m| m as usize)));
    made
}

/// The user's probes injected into `ptx`, loaded as a module in the current context.
fn load_instrumented(ptx: &str) -> Option<Handle> {
    let user = defaults::user().filter(|u| u.on_device())?;
    let text = user.instrument(ptx)?;
    let load = crate::events::MODULE_LOAD_DATA.get_or_ask()?;
    let mut module: Handle = std::ptr::null_mut();
    // SAFETY: the driver's cuModuleLoadData, writing one handle, with NUL-terminated PTX.
    let result = unsafe { load(&mut module, text.as_ptr().cast::<c_void>()) };
    user.loaded(result);
    (result == 0 && !module.is_null()).then_some(module)
}
