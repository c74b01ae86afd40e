//! The launch's tag in device contexts (issue 28): the parameter the injector appends to each
//! kernel whose device probes read `tag_id` (`egpu::device::inject::InjectOptions::launch_tags`),
//! filled at every launch with the launching thread's tag id.
//!
//! A module instrumented with such kernels says where the parameter is (its index, its byte
//! offset: [`pending`]); once the driver loaded it, its kernels are known by name ([`loaded`]).
//! From then on every launch takes the whole way (`defaults::swap_launches`), where
//! [`Storage::args`] looks the launched function up: the first launch of a function asks the
//! driver for its name and, where it can say (`cuFuncGetParamInfo`, `cuKernelGetParamInfo`,
//! CUDA 12.4), whether it has the parameter where its name's kernels have it (a kernel of the
//! same name loaded as it came, after the driver refused the instrumented one, does not); each
//! thread remembers its last function. A launch of a function with the parameter passes the
//! caller's arguments with the tag added, built on the stack (heap only past 64 parameters or a
//! buffer of 1 KiB): in the `kernelParams` form an array of one pointer more, in the `extra`
//! form (`CU_LAUNCH_PARAM_BUFFER_POINTER`/`_SIZE`) the buffer copied with the tag at its
//! offset and the size grown. Other launches go on with the caller's arguments unchanged.
//! A module or library unloaded forgets every function ([`forget`]): a handle may come back
//! as another function.
//!
//! Launches are `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel` (and their
//! `_ptsz` forms); a kernel node captured from a stream gets the tag its launch had. Kernel
//! nodes made or set by hand (`cuGraphAddKernelNode`, `cuGraphKernelNodeSetParams`,
//! `cuGraphExecKernelNodeSetParams`, `cuGraphAddNode`, `cuGraphNodeSetParams`,
//! `cuGraphExecNodeSetParams`, every version) take the same way with the node's lists: the
//! tag of the thread that made or set the node (`events::graphs`).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use egpu::device::inject::LaunchParam;

use crate::real::Hook;
use crate::{CuResult, Handle};

/// Where a kernel's launch parameter is: its index and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Param {
    index: u32,
    offset: u32,
}

/// Whether any kernel with the parameter was loaded: the launches' check.
static ANY: AtomicBool = AtomicBool::new(false);
/// Counts [`forget`]s: what a thread remembers of an older generation is forgotten.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Kernels loaded with the parameter, by name (a name may have several: Triton's kernels
/// specialised differently), and the answers for functions launched.
static BY_NAME: Mutex<Option<HashMap<String, Vec<Param>>>> = Mutex::new(None);
static BY_FUNCTION: RwLock<Option<HashMap<usize, Option<Param>>>> = RwLock::new(None);

thread_local! {
    /// The module being loaded on this thread: its kernels' parameters, until the driver says.
    static PENDING: Cell<Vec<LaunchParam>> = const { Cell::new(Vec::new()) };
    /// The thread's last function launched, its generation and its answer.
    static LAST: Cell<(usize, u64, Option<Param>)> = const { Cell::new((0, u64::MAX, None)) };
}

/// `cuFuncGetParamInfo`'s signature (and `cuKernelGetParamInfo`'s): the function, the index,
/// the offset and size written.
type ParamInfoFn = unsafe extern "C" fn(Handle, usize, *mut usize, *mut usize) -> CuResult;
static FUNC_PARAM_INFO: Hook<ParamInfoFn> = Hook::new(c"cuFuncGetParamInfo", std::ptr::null_mut);
static KERNEL_PARAM_INFO: Hook<ParamInfoFn> =
    Hook::new(c"cuKernelGetParamInfo", std::ptr::null_mut);

/// A module instrumented on this thread, about to be loaded: where its kernels' parameters are.
pub(crate) fn pending(params: &[LaunchParam]) {
    PENDING.set(params.to_vec());
}

/// The driver's answer to the load of the module [`pending`] described: its kernels known when
/// loaded (`result` 0).
pub(crate) fn loaded(result: CuResult) {
    let params = PENDING.take();
    if result != 0 || params.is_empty() {
        return;
    }
    let mut by_name = BY_NAME.lock().unwrap_or_else(|p| p.into_inner());
    let by_name = by_name.get_or_insert_with(HashMap::new);
    for p in params {
        let param = Param { index: p.index, offset: p.offset };
        let known = by_name.entry(p.kernel).or_default();
        if !known.contains(&param) {
            known.push(param);
        }
    }
    ANY.store(true, Ordering::Release);
    // Launches must reach `Storage::args`: the whole way.
    crate::defaults::swap_launches();
    forget();
}

/// A module or library unloaded: the answers for functions forgotten.
pub(crate) fn forget() {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let mut by_function = BY_FUNCTION.write().unwrap_or_else(|p| p.into_inner());
    GENERATION.fetch_add(1, Ordering::AcqRel);
    *by_function = None;
}

/// Whether any kernel with the parameter was loaded (else no function has it).
#[inline(always)]
pub(crate) fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// Where `f`'s launch parameter is, if it has one.
#[inline(always)]
fn param_of(f: Handle) -> Option<Param> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    match LAST.get() {
        (last, g, param) if last == f as usize && g == generation => param,
        _ => resolve(f, generation),
    }
}

#[cold]
#[inline(never)]
fn resolve(f: Handle, generation: u64) -> Option<Param> {
    let known = BY_FUNCTION.read().ok().and_then(|m| m.as_ref()?.get(&(f as usize)).copied());
    let param = known.unwrap_or_else(|| {
        let param = ask(f);
        let mut by_function = BY_FUNCTION.write().unwrap_or_else(|p| p.into_inner());
        if GENERATION.load(Ordering::Acquire) == generation {
            by_function.get_or_insert_with(HashMap::new).insert(f as usize, param);
        }
        param
    });
    LAST.set((f as usize, generation, param));
    param
}

/// `f`'s parameter, by its name's kernels, confirmed by the driver where it can say.
fn ask(f: Handle) -> Option<Param> {
    let name = crate::defaults::function_name(f)?;
    let candidates =
        BY_NAME.lock().ok()?.as_ref().and_then(|m| m.get(&name).cloned()).unwrap_or_default();
    if candidates.is_empty() {
        return None;
    }
    let hooks = [&FUNC_PARAM_INFO, &KERNEL_PARAM_INFO];
    let info = |index: u32| {
        hooks.iter().find_map(|hook| {
            let get = hook.get_or_ask()?;
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: the driver's function, writing two sizes, of the caller's handle.
            let result = unsafe { get(f, index as usize, &mut offset, &mut size) };
            (result == 0).then_some((offset, size))
        })
    };
    if hooks.iter().all(|h| h.get_or_ask().is_none()) {
        // A driver before 12.4: the name alone, when it says one thing.
        return candidates.windows(2).all(|w| w[0] == w[1]).then_some(candidates[0]);
    }
    candidates
        .into_iter()
        .find(|c| info(c.index) == Some((c.offset as usize, 8)) && info(c.index + 1).is_none())
}

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const END: usize = 0;
const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;
/// The parameters and the buffer bytes a launch's arguments take on the stack.
const INLINE_PARAMS: usize = 64;
const INLINE_WORDS: usize = 128;

/// A launch's arguments with its tag added, for as long as the call: on the stack, but for
/// kernels of many parameters.
pub(crate) struct Storage {
    tag: u64,
    params: [MaybeUninit<*mut c_void>; INLINE_PARAMS],
    more_params: Vec<*mut c_void>,
    words: [MaybeUninit<u64>; INLINE_WORDS],
    more_words: Vec<u64>,
    size: usize,
    extra: [*mut c_void; 5],
}

/// A launch's argument lists: `(kernelParams,)` or `(kernelParams, extra)`.
pub(crate) trait Args: Copy {
    /// `kernelParams` and `extra` (null where the entry point has none).
    fn get(self) -> (*mut *mut c_void, *mut *mut c_void);
    /// These lists, from `kernelParams` and `extra`.
    fn with(params: *mut *mut c_void, extra: *mut *mut c_void) -> Self;
}

type List = *mut *mut c_void;

impl Args for (List,) {
    fn get(self) -> (List, List) {
        (self.0, std::ptr::null_mut())
    }
    fn with(params: List, _: List) -> Self {
        (params,)
    }
}

impl Args for (List, List) {
    fn get(self) -> (List, List) {
        self
    }
    fn with(params: List, extra: List) -> Self {
        (params, extra)
    }
}

impl Storage {
    #[inline(always)]
    pub(crate) fn new() -> Storage {
        Storage {
            tag: 0,
            params: [MaybeUninit::uninit(); INLINE_PARAMS],
            more_params: Vec::new(),
            words: [MaybeUninit::uninit(); INLINE_WORDS],
            more_words: Vec::new(),
            size: 0,
            extra: [std::ptr::null_mut(); 5],
        }
    }

    /// The arguments a launch of `f` passes: `args` as they were, or with the tag added when
    /// `f` has the parameter. The lists returned point into `self`, which outlives the call.
    ///
    /// # Safety
    ///
    /// `args` are a launch's, valid as the driver takes them.
    #[inline(always)]
    pub(crate) unsafe fn args<A: Args>(&mut self, f: Handle, args: A) -> A {
        let Some(param) = param_of(f) else { return args };
        let (params, extra) = args.get();
        // SAFETY: as the caller promises.
        match unsafe { self.tagged(param, params, extra) } {
            Some((params, extra)) => A::with(params, extra),
            None => args,
        }
    }

    #[cold]
    #[inline(never)]
    unsafe fn tagged(&mut self, param: Param, params: List, extra: List) -> Option<(List, List)> {
        self.tag = crate::local().attr.tags.get()[0];
        let index = param.index as usize;
        if !params.is_null() || (extra.is_null() && index == 0) {
            let list: &mut [MaybeUninit<*mut c_void>] = if index < INLINE_PARAMS {
                &mut self.params[..=index]
            } else {
                self.more_params = vec![std::ptr::null_mut(); index + 1];
                // SAFETY: `*mut c_void` and `MaybeUninit` of it have the same layout.
                unsafe { &mut *(self.more_params.as_mut_slice() as *mut [_] as *mut [_]) }
            };
            for (i, slot) in list.iter_mut().take(index).enumerate() {
                // SAFETY: the caller's array holds the kernel's `index` parameters.
                slot.write(unsafe { params.add(i).read() });
            }
            list[index].write((&raw mut self.tag).cast());
            return Some((list.as_mut_ptr().cast(), extra));
        }
        // SAFETY: as the caller promises.
        let (buffer, size) = unsafe { buffer_of(extra) }?;
        let offset = param.offset as usize;
        let words = offset / 8 + 1;
        let into: *mut u64 = if words <= INLINE_WORDS {
            self.words.as_mut_ptr().cast()
        } else {
            self.more_words = vec![0; words];
            self.more_words.as_mut_ptr()
        };
        // SAFETY: `words` words at `into`, the caller's buffer of `size` bytes.
        unsafe {
            std::ptr::write_bytes(into, 0, words);
            let copied = size.min(offset);
            std::ptr::copy_nonoverlapping(buffer.cast::<u8>(), into.cast::<u8>(), copied);
            into.add(offset / 8).write(self.tag);
        }
        self.size = offset + 8;
        self.extra = [
            BUFFER_POINTER as *mut c_void,
            into.cast(),
            BUFFER_SIZE as *mut c_void,
            (&raw mut self.size).cast(),
            END as *mut c_void,
        ];
        Some((params, self.extra.as_mut_ptr()))
    }
}

/// The buffer and its size in a launch's `extra` list; `None` for a list that is not one.
///
/// # Safety
///
/// `extra` is null or a list ended by `CU_LAUNCH_PARAM_END`, as the driver takes it.
unsafe fn buffer_of(extra: List) -> Option<(*const c_void, usize)> {
    let (mut buffer, mut size) = (None, None);
    let mut at = extra;
    for _ in 0..16 {
        if at.is_null() {
            return None;
        }
        // SAFETY: the list's entries up to its end, as the caller promises.
        let key = unsafe { at.read() } as usize;
        match key {
            END => break,
            // SAFETY: each key but the end has its value after it.
            BUFFER_POINTER => buffer = Some(unsafe { at.add(1).read() }.cast_const()),
            // SAFETY: the size's value points at a `size_t`.
            BUFFER_SIZE => size = Some(unsafe { at.add(1).read().cast::<usize>().read() }),
            _ => return None,
        }
        // SAFETY: past the key and its value, within the list.
        at = unsafe { at.add(2) };
    }
    let buffer = buffer.filter(|b| !b.is_null())?;
    Some((buffer, size?))
}
