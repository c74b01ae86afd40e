//! Module loads: their context ([`ModuleLoadCtx`]), and with the user's device probes the PTX
//! instrumented loaded in place of the program's.

use std::ffi::c_void;
use std::os::unix::ffi::OsStrExt;

use egpu::ebpf::ModuleLoadCtx;

use super::event::observe;
use crate::device::{Refusal, libraries};
use crate::{CuResult, Handle, defaults};

fn module_with(ptx: Option<&str>) -> ModuleLoadCtx {
    let mut ctx = ModuleLoadCtx::default();
    if let Some(ptx) = ptx {
        ctx.image_bytes = ptx.len() as u64;
        ctx.has_ptx = 1;
    }
    ctx
}

/// The PTX of the caller's module image (see [`crate::device::ptx_of`]).
fn ptx(image: *const c_void) -> Option<Result<String, Refusal>> {
    // SAFETY: the caller's image, which the driver is about to read (none: the driver fails).
    (!image.is_null()).then(|| unsafe { crate::device::ptx_of(image) })
}

/// After a module load: the handle it wrote to `out`.
pub(super) fn loaded(out: *mut Handle) -> impl FnOnce(&mut ModuleLoadCtx, CuResult) {
    move |ctx, result| {
        if result == 0 && !out.is_null() {
            // SAFETY: the driver wrote the handle to the caller's pointer.
            ctx.module = unsafe { out.read() } as u64;
        }
    }
}

/// A module load through `load` (the driver's, given an image; a library's when `library`):
/// with the user's device probes, the image's PTX instrumented is loaded in its place (the
/// original when the driver refuses it), as one event; a library that waits for a context
/// ([`libraries::waits`]) is loaded as it came, and its kernels instrumented in each context
/// where the program finds them. (Inlined into the entry points that call it, in another
/// module.)
#[inline]
pub(super) fn load_module(
    out: *mut Handle,
    image: *const c_void,
    library: bool,
    load: impl Fn(*const c_void) -> CuResult,
) -> CuResult {
    load_with(out, image, ptx(image), library, load)
}

/// [`load_module`] of an image whose PTX the caller found (`ptx`, `None` where there is no image
/// to read).
#[inline]
pub(super) fn load_with(
    out: *mut Handle,
    image: *const c_void,
    ptx: Option<Result<String, Refusal>>,
    library: bool,
    load: impl Fn(*const c_void) -> CuResult,
) -> CuResult {
    let user = defaults::user().filter(|u| u.on_device());
    if let (true, Some(_), Some(Ok(text))) = (library, &user, &ptx)
        && libraries::waits()
    {
        let (build, text) = (module_with(Some(text)), text.clone());
        return observe(
            |_, _| build,
            || {
                let result = load(image);
                if result == 0 && !out.is_null() {
                    // SAFETY: the driver wrote the handle to the caller's pointer.
                    libraries::defer(unsafe { out.read() }, text);
                }
                result
            },
            loaded(out),
        );
    }
    let instrumented = match (&user, &ptx) {
        (Some(user), Some(Ok(text))) => user.instrument(text),
        (Some(_), Some(Err((why, detail)))) => {
            crate::device::refused(*why, detail.clone());
            None
        }
        _ => None,
    };
    let call = || {
        if let (Some(user), Some(ptx)) = (&user, &instrumented) {
            let result = load(ptx.as_ptr().cast());
            user.loaded(result);
            if result == 0 {
                return 0;
            }
        }
        load(image)
    };
    let mut build = module_with(ptx.and_then(Result::ok).as_deref());
    build.instrumented = u32::from(instrumented.is_some());
    observe(
        |_, _| build,
        call,
        move |ctx: &mut ModuleLoadCtx, result| {
            loaded(out)(ctx, result);
        },
    )
}

/// Defines an interposed module load ([`load_module`]) whose arguments `$out` and `$image` are
/// where the module's handle goes and the image (a library's when `$library`): the driver's
/// function is called with the caller's arguments, the image (`$image`) the one loaded (the
/// instrumented one, or the caller's).
macro_rules! load {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $out:ident, $image:ident, $library:literal) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments (or the instrumented
            // image); the JIT and library options pass through.
            load_module($out, $image, $library, |$image| unsafe { real($($arg),*) })
        });
    };
}
pub(super) use load;

/// Defines an interposed lookup in a library or of a kernel's function ([`libraries`]):
/// `get_kernel(out, library, name)` (`cuLibraryGetKernel`: the kernel handle remembered),
/// `found(out)` (`cuModuleGetFunction`: the function's device kept, [`super::functions`]),
/// `function(out, kernel)` (`cuKernelGetFunction`) and `module(out, library)`
/// (`cuLibraryGetModule`): the instrumented function or module in the current context, when the
/// library waits ([`libraries::function`], [`libraries::module`]); `global(address, bytes,
/// library, name)` (`cuLibraryGetGlobal`, `cuLibraryGetManaged`): that module's variable;
/// `set(kernel, setting)` (`cuKernelSetAttribute`, `cuKernelSetCacheConfig`): set on the
/// kernel's instrumented functions too ([`libraries::set`]); `unload(library)`
/// (`cuLibraryUnload`): forgotten with its instrumented modules, and the merger woken after.
macro_rules! library {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) get_kernel($out:ident, $library:ident, $kname:ident)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 && !$out.is_null() {
                // SAFETY: the driver wrote the handle to the caller's pointer.
                let kernel = unsafe { $out.read() };
                crate::device::libraries::found(kernel, $library, $kname);
                crate::events::functions::found_kernel(kernel);
            }
            result
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) found($out:ident)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 && !$out.is_null() {
                // SAFETY: the driver wrote the handle to the caller's pointer.
                crate::events::functions::found(unsafe { $out.read() });
            }
            result
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $lookup:ident($out:ident, $of:ident)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            if !$out.is_null() && let Some(found) = crate::device::libraries::$lookup($of) {
                // SAFETY: the caller's place for the handle.
                unsafe { $out.write(found) };
                return 0;
            }
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 && !$out.is_null() && stringify!($lookup) == "function" {
                // A kernel's function in the current context.
                // SAFETY: the driver wrote the handle to the caller's pointer.
                crate::events::functions::found(unsafe { $out.read() });
            }
            result
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) global($address:ident, $bytes:ident, $library:ident, $vname:ident)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            if let Some(result) =
                crate::device::libraries::global($address, $bytes, $library, $vname)
            {
                return result;
            }
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            unsafe { real($($arg),*) }
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) set($kernel:ident, $setting:expr)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 {
                crate::device::libraries::set($kernel, $setting);
            }
            result
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) unload($library:ident)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            crate::device::libraries::unloaded($library);
            crate::device::launch_tags::forget();
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 {
                crate::device::synced();
            }
            result
        });
    };
}
pub(super) use library;

/// Defines the interposed `cuModuleLoadFatBinary` ([`load_module`]): the caller's fat binary goes
/// to it, and the instrumented PTX to `cuModuleLoadData` (a loader of fat binaries need not take
/// PTX text).
macro_rules! load_fatbinary {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $out:ident, $image:ident) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            let original = $image;
            load_module($out, $image, false, |$image| {
                if $image == original {
                    // SAFETY: the driver's function, with the caller's arguments.
                    return unsafe { real($($arg),*) };
                }
                match MODULE_LOAD_DATA.get_or_ask() {
                    // SAFETY: the driver's cuModuleLoadData, with the caller's place for the
                    // module and the instrumented PTX, NUL-terminated.
                    Some(load_data) => unsafe { load_data($out, $image) },
                    None => NOT_FOUND,
                }
            })
        });
    };
}
pub(super) use load_fatbinary;

/// The bytes of the module file at `path` (a cubin, a fat binary or PTX text), NUL-terminated;
/// `None` when it cannot be read (the driver's loader then says why).
pub(super) fn read_file(path: *const std::ffi::c_char) -> Option<Vec<u8>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated file name, which the driver is about to read.
    let name = unsafe { std::ffi::CStr::from_ptr(path) };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    let size = std::fs::metadata(path).ok()?.len();
    if size > egpu::device::cubin::MAX_BYTES as u64 {
        return None;
    }
    let mut bytes = std::fs::read(path).ok()?;
    bytes.push(0);
    Some(bytes)
}

/// Defines an interposed load of a module file (`cuModuleLoad`, `cuLibraryLoadFromFile`) whose
/// arguments `$out` and `$path` are where the handle goes and the file's name (a library's when
/// `$library`): the file is read
/// ([`read_file`]) and its PTX instrumented loaded through `$data` (the loader of images, with
/// `$data_arg`s, in which `$image` is the instrumented PTX); else the caller's call.
macro_rules! load_file {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $out:ident, $path:ident, $library:literal, $image:ident => $data:ident($($data_arg:expr),*)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            let bytes = read_file($path);
            let file = bytes.as_ref().map_or(std::ptr::null(), |b| b.as_ptr().cast::<c_void>());
            let ptx = bytes.as_deref().map(crate::device::ptx_in);
            load_with($out, file, ptx, $library, |$image| {
                if $image == file {
                    // SAFETY: the driver's function, with the caller's arguments.
                    return unsafe { real($($arg),*) };
                }
                match $data.get_or_ask() {
                    // SAFETY: the driver's loader of images, with the caller's place for the
                    // handle and options, and the instrumented PTX, NUL-terminated.
                    Some(load_data) => unsafe { load_data($($data_arg),*) },
                    None => NOT_FOUND,
                }
            })
        });
    };
}
pub(super) use load_file;
