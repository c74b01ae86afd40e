//! Host probes attached while the program runs, by the program itself through egpu's C ABI
//! (`egpu_cuda_attach` in `libegpu_capi.so`), which finds these entry points with
//! `dlsym(RTLD_DEFAULT, …)`.
//!
//! The C ABI's library has its own copy of egpu, so a probe crosses as a pack's text (one
//! probe, verified again here, by this library's verifier) with the shared-memory names of its
//! maps, which this library opens: the probe updates the same memory the caller reads.

use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use egpu::ebpf::AttachPoint;
use egpu::host::ProbeId;
use egpu::maps::RawMap;
use egpu::pack::Pack;

/// The probes attached here, by the id handed out (its index + 1).
static ATTACHED: Mutex<Vec<Option<ProbeId>>> = Mutex::new(Vec::new());

/// Attaches the host probe of a pack to this process's CUDA events: `pack_length` bytes of a
/// pack's text at `pack` holding one host probe, and the shared-memory names of its maps, in
/// the order of its map table, each followed by a NUL (`names_length` bytes in all). An id
/// above 0, or -1 with why written into `error` (`error_length` bytes, NUL-terminated).
///
/// # Safety
/// `pack` and `names` are valid for their lengths; `error` is null or valid for writes of
/// `error_length` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn egpu_preload_attach(
    pack: *const c_char,
    pack_length: usize,
    names: *const c_char,
    names_length: usize,
    error: *mut c_char,
    error_length: usize,
) -> i64 {
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: the caller's promise.
        let (pack, names) = unsafe { (bytes(pack, pack_length), bytes(names, names_length)) };
        attach(pack, names)
    });
    let why = match outcome {
        Ok(Ok(id)) => return id,
        Ok(Err(why)) => why,
        Err(_) => "egpu panicked (a bug in egpu)".to_owned(),
    };
    if !error.is_null() && error_length > 0 {
        let n = why.len().min(error_length - 1);
        // SAFETY: the caller's buffer of `error_length` bytes, `n + 1` of them written.
        unsafe {
            std::ptr::copy_nonoverlapping(why.as_ptr(), error.cast::<u8>(), n);
            *error.add(n) = 0;
        }
    }
    -1
}

/// # Safety
/// `ptr` is null or valid for `len` bytes that outlive the call.
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}

fn attach(pack: &[u8], names: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(pack).map_err(|_| "the pack is not UTF-8".to_owned())?;
    let pack = Pack::parse(text).map_err(|e| e.to_string())?;
    let [probe] = pack.probes() else {
        return Err(format!("a pack of one probe, not {}", pack.probes().len()));
    };
    if !matches!(probe.program.program().attach_point(), AttachPoint::Host(..)) {
        return Err(format!(
            "{} attaches to {}: only host probes attach while the program runs",
            probe.name,
            probe.program.program().attach_point()
        ));
    }
    let names: Vec<&str> = names
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| std::str::from_utf8(n).map_err(|_| "a map name is not UTF-8".to_owned()))
        .collect::<Result<_, _>>()?;
    if names.len() != probe.maps.len() {
        return Err(format!("{} map names for {} maps", names.len(), probe.maps.len()));
    }
    let mut maps: Vec<RawMap> = Vec::new();
    for (name, layout) in names.iter().zip(&probe.maps) {
        let map = RawMap::open_shared(name).map_err(|e| format!("map {name}: {e}"))?;
        if map.geometry() != layout {
            return Err(format!("map {name}: its layout is not the one the pack declares"));
        }
        maps.push(map);
    }
    let probes = crate::defaults::probes()
        .ok_or_else(|| "the preloaded library's probes could not be set up".to_owned())?;
    let id = probes.attach(&probe.program, &maps).map_err(|e| e.to_string())?;
    let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
    attached.push(Some(id));
    Ok(attached.len() as i64)
}

/// Detaches the probe `egpu_preload_attach` gave `id`: 0, or -1 when it is not attached.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn egpu_preload_detach(id: i64) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        let slot = usize::try_from(id - 1).ok().and_then(|i| attached.get_mut(i));
        let Some(probe) = slot.and_then(Option::take) else { return -1 };
        match crate::defaults::probes() {
            Some(probes) if probes.detach(probe) => 0,
            _ => -1,
        }
    });
    outcome.unwrap_or(-1)
}

/// Runs the probes of every event posted so far, on the calling thread: when it returns, the
/// maps hold them. 0, or -1 when the probes could not be set up.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn egpu_preload_flush() -> c_int {
    let outcome = std::panic::catch_unwind(|| match crate::defaults::probes() {
        Some(probes) => {
            probes.flush();
            0
        }
        None => -1,
    });
    outcome.unwrap_or(-1)
}
