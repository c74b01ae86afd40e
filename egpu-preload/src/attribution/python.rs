//! The innermost Python frames of the launching thread, read from CPython's own structures,
//! whose symbols are looked up in the process at run time (`dlsym`): this library never links
//! libpython.
//!
//! Only CPython 3.11 and 3.12 are read (`Py_GetVersion`); another version is refused, once,
//! with a message, and its launches get native frames only. The frames are read whether or not
//! the thread holds the GIL: PyTorch, like most extension modules, releases it around its
//! operators (`pybind11::gil_scoped_release`), so its launches come with the GIL released, and
//! taking the GIL here could deadlock (a thread holding it may wait for a lock the launching
//! thread holds, the CUDA caching allocator's for one). What makes reading them without it
//! sound:
//!
//! - the thread reads its own frames: its thread state (`PyGILState_GetThisThreadState`, a
//!   thread-local), its `cframe`'s current frame, and each frame's `previous`. Only the thread
//!   itself pushes and pops its frames, and it is inside this call, so they stay as they are
//!   while they are read;
//! - each frame holds a strong reference to its code object, so the code objects, their file and
//!   name strings (immutable) and their line tables outlive the read; nothing here takes or gives
//!   back a reference (reference counts are the GIL holder's to change);
//! - the structures' offsets are those of CPython 3.11's and 3.12's headers (`Layout`), and
//!   each code object's type is checked to be `PyCode_Type` before it is read: a frame whose code
//!   is not ends the walk. The first captures of a process also check every address with
//!   `process_vm_readv` before reading it, so that a layout that were wrong would show as no
//!   frames, not a crash.
//!
//! On the hot path a frame is its code object's address and the offset of its instruction in
//! the code (three loads a frame); its line (`PyCode_Addr2Line`, which decodes the code's line
//! table), file and name are read only for a new site. Two calls from one line are two sites
//! then, with the same text.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use egpu::host::sites::PythonFrame;

/// Python frames a site keeps, at most.
pub(crate) const MAX_FRAMES: usize = 8;

/// Where CPython keeps what is read, in bytes (64-bit builds).
#[derive(Debug)]
struct Layout {
    /// `PyThreadState.cframe`.
    cframe: usize,
    /// `_PyCFrame.current_frame`.
    current_frame: usize,
    /// `_PyInterpreterFrame.f_code`, `.previous`, `.prev_instr` and `.owner`.
    code: usize,
    previous: usize,
    prev_instr: usize,
    owner: usize,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where a compact string's
    /// characters start, ASCII or not.
    ascii: usize,
    compact: usize,
}

/// CPython 3.11 (`Include/cpython/pystate.h`, `Include/internal/pycore_frame.h`,
/// `Include/cpython/unicodeobject.h`).
const LAYOUT_3_11: Layout = Layout {
    cframe: 56,
    current_frame: 8,
    code: 32,
    previous: 48,
    prev_instr: 56,
    owner: 69,
    ascii: 48,
    compact: 72,
};

/// CPython 3.12 (the same headers).
const LAYOUT_3_12: Layout = Layout {
    cframe: 56,
    current_frame: 0,
    code: 0,
    previous: 8,
    prev_instr: 56,
    owner: 70,
    ascii: 40,
    compact: 56,
};

/// A frame's instruction offset when it has not started (its line is its code's first).
const BEFORE_START: u32 = u32::MAX;
/// `FRAME_OWNED_BY_CSTACK` (3.12): an entry frame of the interpreter, not the program's.
const OWNED_BY_CSTACK: u8 = 3;
/// `PyTypeObject`'s `tp_basicsize` and `tp_members` (unchanged since Python 3.8).
const TP_BASICSIZE: usize = 32;
const TP_MEMBERS: usize = 240;
/// `PyMemberDef`: its size and where its `offset` is.
const MEMBER_SIZE: usize = 40;
const MEMBER_OFFSET: usize = 16;
/// `PyObject.ob_type`, and a string's length and state (`PyASCIIObject`).
const OB_TYPE: usize = 8;
const UNICODE_LENGTH: usize = 16;
const UNICODE_STATE: usize = 32;

/// What is used of CPython.
struct Api {
    layout: &'static Layout,
    is_initialized: unsafe extern "C" fn() -> c_int,
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    addr_to_line: unsafe extern "C" fn(*mut c_void, c_int) -> c_int,
    /// `&PyCode_Type` and `&PyUnicode_Type`.
    code_type: usize,
    unicode_type: usize,
    /// Where a code object's instructions start (`PyCode_Type.tp_basicsize`, which is
    /// `offsetof(PyCodeObject, co_code_adaptive)`), and its `co_filename` and `co_name` (from
    /// `PyCode_Type.tp_members`).
    code_start: usize,
    filename: usize,
    name: usize,
}

/// What was found of Python in this process.
enum Found {
    /// No Python, or Python frames not wanted (`EGPU_SITES_PYTHON=0`).
    None,
    /// A version that is not read, and why.
    Refused(String),
    /// CPython `version`, read.
    Read(String, Api),
}

static FOUND: OnceLock<Found> = OnceLock::new();

/// Captures left whose addresses are checked before they are read.
static CHECKED: AtomicU32 = AtomicU32::new(16);

/// The lookup of `name` in the process (the real `dlsym`).
fn symbol(name: &CStr) -> *mut c_void {
    let Some(lookup) = crate::real::dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the real dlsym, in the global scope, with a C string.
    unsafe { lookup(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// CPython in this process, looked up at the first capture that asks.
fn found() -> &'static Found {
    FOUND.get_or_init(|| {
        if std::env::var_os("EGPU_SITES_PYTHON").is_some_and(|v| v == "0") {
            return Found::None;
        }
        let version = symbol(c"Py_GetVersion");
        if version.is_null() {
            return Found::None;
        }
        // SAFETY: `Py_GetVersion`, which returns a static C string.
        let version: unsafe extern "C" fn() -> *const c_char =
            unsafe { std::mem::transmute(version) };
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(version()) }.to_string_lossy().into_owned();
        let number = text.split_whitespace().next().unwrap_or_default().to_string();
        let found = match accepted(&number) {
            Ok(layout) => match api(layout) {
                Ok(api) => Found::Read(number, api),
                Err(why) => Found::Refused(format!("Python {number}: {why}")),
            },
            Err(why) => Found::Refused(why),
        };
        if let Found::Refused(why) = &found {
            eprintln!("egpu: launch sites: {why}; launches get native frames only");
        }
        found
    })
}

/// Whether CPython `version` (`3.12.3`) is one whose frames are read: its layout.
fn accepted(version: &str) -> Result<&'static Layout, String> {
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("3"), Some("11")) => Ok(&LAYOUT_3_11),
        (Some("3"), Some("12")) => Ok(&LAYOUT_3_12),
        _ => Err(format!("Python {version} is not supported (CPython 3.11 and 3.12 are)")),
    }
}

fn api(layout: &'static Layout) -> Result<Api, String> {
    macro_rules! get {
        ($name:literal, $type:ty) => {{
            let p = symbol($name);
            if p.is_null() {
                return Err(format!("{} is missing", $name.to_string_lossy()));
            }
            // SAFETY: CPython's exported function of this name, whose signature is `$type`.
            unsafe { std::mem::transmute::<*mut c_void, $type>(p) }
        }};
    }
    let code_type = symbol(c"PyCode_Type") as usize;
    let unicode_type = symbol(c"PyUnicode_Type") as usize;
    if code_type == 0 || unicode_type == 0 {
        return Err("PyCode_Type or PyUnicode_Type is missing".into());
    }
    // SAFETY: `PyCode_Type` is a static `PyTypeObject`: its basic size, and its members, a
    // static array of `PyMemberDef` ended by one without a name.
    let (code_start, members) = unsafe {
        (
            (code_type as *const u8).add(TP_BASICSIZE).cast::<isize>().read() as usize,
            (code_type as *const u8).add(TP_MEMBERS).cast::<*const u8>().read(),
        )
    };
    let (mut filename, mut name) = (0, 0);
    for i in 0..64 {
        if members.is_null() {
            break;
        }
        // SAFETY: entry `i` of the array, before the one that ends it.
        let (member, offset) = unsafe {
            let entry = members.add(i * MEMBER_SIZE);
            let member = entry.cast::<*const c_char>().read();
            if member.is_null() {
                break;
            }
            (CStr::from_ptr(member), entry.add(MEMBER_OFFSET).cast::<isize>().read() as usize)
        };
        match member.to_bytes() {
            b"co_filename" => filename = offset,
            b"co_name" => name = offset,
            _ => {}
        }
    }
    if filename == 0 || name == 0 || !(64..1024).contains(&code_start) {
        return Err("its code objects' layout is not the one expected".into());
    }
    Ok(Api {
        layout,
        is_initialized: get!(c"Py_IsInitialized", unsafe extern "C" fn() -> c_int),
        this_thread_state: get!(
            c"PyGILState_GetThisThreadState",
            unsafe extern "C" fn() -> *mut c_void
        ),
        addr_to_line: get!(c"PyCode_Addr2Line", unsafe extern "C" fn(*mut c_void, c_int) -> c_int),
        code_type,
        unicode_type,
        code_start,
        filename,
        name,
    })
}

/// What [`status`] says of Python, for the summary.
pub(crate) fn status() -> Option<String> {
    match FOUND.get()? {
        Found::None => None,
        Found::Refused(why) => Some(format!("refused: {why}")),
        Found::Read(v, _) => {
            Some(format!("CPython {v}, frames read from the thread's own state, GIL or not"))
        }
    }
}

/// Whether `len` bytes at `address` can be read (`process_vm_readv` on this process, which
/// fails rather than faults); true where the call itself is not allowed.
fn readable(address: usize, len: usize) -> bool {
    let mut buf = [0u8; 16];
    let len = len.min(buf.len());
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: address as *mut c_void, iov_len: len };
    // SAFETY: reads into `buf` only; the remote range is checked by the kernel.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        let e = std::io::Error::last_os_error().raw_os_error();
        return matches!(e, Some(libc::EPERM | libc::ENOSYS));
    }
    n as usize == len
}

/// Reads the word at `base + offset` (`check`: only once `readable` says it can be).
///
/// # Safety
///
/// `base + offset` must be readable, or `check` set.
unsafe fn word(base: usize, offset: usize, check: bool) -> Option<usize> {
    let at = base.checked_add(offset)?;
    if base == 0 || at % std::mem::align_of::<usize>() != 0 || (check && !readable(at, 8)) {
        return None;
    }
    // SAFETY: the caller's promise, or checked above.
    Some(unsafe { (at as *const usize).read() })
}

/// The innermost Python frames of the calling thread: their code objects and the offsets of
/// their instructions (`BEFORE_START` for a frame that has not started).
pub(crate) struct Frames {
    api: Option<&'static Api>,
    pub(crate) keys: [(u64, u32); MAX_FRAMES],
    pub(crate) n: usize,
}

impl Frames {
    /// No frames.
    const NONE: Frames = Frames { api: None, keys: [(0, 0); MAX_FRAMES], n: 0 };

    /// The frames as text: file, line and function of each, innermost first (for a new site,
    /// within the capture's call, while the frames hold their code objects).
    pub(crate) fn resolve(&self) -> Vec<PythonFrame> {
        let Some(api) = self.api else { return Vec::new() };
        (0..self.n)
            .map(|i| {
                let (code, at) = (self.keys[i].0 as usize, self.keys[i].1);
                let offset = if at == BEFORE_START { -1 } else { at as c_int };
                // SAFETY: a code object one of this thread's frames holds, checked to be one;
                // its file and name are strings it holds; its line table is read by CPython's
                // function, which only reads it.
                let (file, function, line) = unsafe {
                    let line = (api.addr_to_line)(code as *mut c_void, offset);
                    (string(api, code, api.filename), string(api, code, api.name), line)
                };
                PythonFrame { file, line: line.max(0) as u32, function }
            })
            .collect()
    }
}

/// The string object at `object + offset`, as text (`?` where it is not a compact string).
///
/// # Safety
///
/// `object + offset` must hold a pointer to a live object (or null).
unsafe fn string(api: &Api, object: usize, offset: usize) -> String {
    let layout = api.layout;
    // SAFETY: the caller's promise; the string's header, then its characters, within it.
    unsafe {
        let Some(s) = word(object, offset, false).filter(|&s| s != 0) else { return "?".into() };
        if word(s, OB_TYPE, false) != Some(api.unicode_type) {
            return "?".into();
        }
        let len = ((s + UNICODE_LENGTH) as *const isize).read().clamp(0, 4096) as usize;
        let state = ((s + UNICODE_STATE) as *const u32).read();
        let (kind, compact, ascii) = ((state >> 2) & 7, state >> 5 & 1, state >> 6 & 1);
        if compact == 0 {
            return "?".into();
        }
        if ascii == 1 {
            let bytes = std::slice::from_raw_parts((s + layout.ascii) as *const u8, len);
            return String::from_utf8_lossy(bytes).into_owned();
        }
        let data = s + layout.compact;
        (0..len)
            .map(|i| {
                let c = match kind {
                    1 => u32::from(*(data as *const u8).add(i)),
                    2 => u32::from(*(data as *const u16).add(i)),
                    _ => *(data as *const u32).add(i),
                };
                char::from_u32(c).unwrap_or('?')
            })
            .collect()
    }
}

/// The calling thread's innermost Python frames (at most `MAX_FRAMES`), when the process runs
/// CPython 3.11 or 3.12 and the thread has a Python thread state; none otherwise.
pub(crate) fn capture() -> Frames {
    let Found::Read(_, api) = found() else { return Frames::NONE };
    let layout = api.layout;
    let mut frames = Frames { api: Some(api), ..Frames::NONE };
    // SAFETY: CPython's functions, then this thread's own state and frames, which only this
    // thread changes and which stay as they are during this call (see the module's
    // documentation); every address read comes from the previous read by CPython's layout,
    // each code object's type is checked before its fields are read, and while `check` holds
    // each address is checked to be readable first.
    unsafe {
        if (api.is_initialized)() == 0 {
            return Frames::NONE;
        }
        let state = (api.this_thread_state)() as usize;
        if state == 0 {
            return Frames::NONE;
        }
        // The first captures of threads that run Python check every address first.
        let check = CHECKED.load(Ordering::Relaxed) > 0
            && CHECKED
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok();
        let Some(cframe) = word(state, layout.cframe, check) else { return Frames::NONE };
        let mut frame = word(cframe, layout.current_frame, check).unwrap_or(0);
        let mut steps = 0;
        while frame != 0 && frames.n < MAX_FRAMES && steps < 64 {
            steps += 1;
            if check && !readable(frame + layout.owner, 1) {
                break;
            }
            let owner = ((frame + layout.owner) as *const u8).read();
            let Some(code) = word(frame, layout.code, check) else { break };
            let Some(previous) = word(frame, layout.previous, check) else { break };
            if owner != OWNED_BY_CSTACK {
                if word(code, OB_TYPE, check) != Some(api.code_type) {
                    break;
                }
                let at = word(frame, layout.prev_instr, check).unwrap_or(0);
                let offset = (at as isize).wrapping_sub((code + api.code_start) as isize);
                let offset = u32::try_from(offset).ok().filter(|&o| o < BEFORE_START);
                frames.keys[frames.n] = (code as u64, offset.unwrap_or(BEFORE_START));
                frames.n += 1;
            }
            frame = previous;
        }
    }
    frames
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_address_is_readable_only_where_memory_is() {
        let word = 7usize;
        assert!(super::readable(&word as *const usize as usize, 8));
        // Unless this process may not read itself this way (then everything reads as readable).
        let local = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        // SAFETY: a read of nothing, to see whether the call is allowed.
        let allowed = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &local, 1, 0) };
        if allowed == 0 {
            assert!(!super::readable(8, 8));
        }
    }

    #[test]
    fn only_cpython_3_11_and_3_12_are_read() {
        assert!(super::accepted("3.11.9").is_ok_and(|l| l.code == 32));
        assert!(super::accepted("3.12.3").is_ok_and(|l| l.code == 0));
        for other in ["3.10.12", "3.13.0", "2.7.18", "3.1", ""] {
            let why = super::accepted(other).expect_err(other);
            assert!(why.contains("3.11 and 3.12"), "{why}");
        }
    }
}
