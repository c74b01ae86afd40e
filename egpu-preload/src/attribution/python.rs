//! The innermost Python frames of the launching thread, read through CPython's C API, which is
//! looked up in the process at run time (`dlsym`): this library never links libpython.
//!
//! Only CPython 3.11 and 3.12 are read (`Py_GetVersion`); another version is refused, once,
//! with a message, and its launches get native frames only. Frames are read only while the
//! thread holds the GIL (`PyGILState_Check`, with the interpreter initialised and the thread
//! having a state): a call made with the GIL released (`ctypes.CDLL`'s functions release it;
//! `ctypes.PyDLL`'s keep it) gets native frames only. On the hot path a frame is its code
//! object's address and its line; the code's file and name are read only for a new site.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use egpu::host::sites::PythonFrame;

/// Python frames a site keeps, at most.
pub(crate) const MAX_FRAMES: usize = 8;

type Object = *mut c_void;

/// The functions of CPython's C API that are read.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    gil_check: unsafe extern "C" fn() -> c_int,
    thread_state: Option<unsafe extern "C" fn() -> *mut c_void>,
    get_frame: unsafe extern "C" fn() -> Object,
    get_code: unsafe extern "C" fn(Object) -> Object,
    get_line: unsafe extern "C" fn(Object) -> c_int,
    get_back: unsafe extern "C" fn(Object) -> Object,
    decref: unsafe extern "C" fn(Object),
    get_attr: unsafe extern "C" fn(Object, *const c_char) -> Object,
    as_utf8: unsafe extern "C" fn(Object, *mut isize) -> *const c_char,
    clear_error: unsafe extern "C" fn(),
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

/// The lookup of `name` in the process (the real `dlsym`).
fn symbol(name: &CStr) -> *mut c_void {
    let Some(lookup) = crate::real::dlsym() else { return std::ptr::null_mut() };
    // SAFETY: the real dlsym, in the global scope, with a C string.
    unsafe { lookup(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// CPython's API in this process, looked up at the first capture that asks.
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
            Ok(()) => match api() {
                Some(api) => Found::Read(number, api),
                None => {
                    Found::Refused(format!("Python {number}: a function of its C API is missing"))
                }
            },
            Err(why) => Found::Refused(why),
        };
        if let Found::Refused(why) = &found {
            eprintln!("egpu: launch sites: {why}; launches get native frames only");
        }
        found
    })
}

/// Whether CPython `version` (`3.12.3`) is one whose frames are read.
pub(crate) fn accepted(version: &str) -> Result<(), String> {
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some("3"), Some("11" | "12")) => Ok(()),
        _ => Err(format!("Python {version} is not supported (CPython 3.11 and 3.12 are)")),
    }
}

fn api() -> Option<Api> {
    macro_rules! get {
        ($name:literal) => {{
            let p = symbol($name);
            // SAFETY: CPython's exported function of this name, whose signature is the field's.
            (!p.is_null()).then(|| unsafe { std::mem::transmute(p) })?
        }};
    }
    let state = symbol(c"_PyThreadState_UncheckedGet");
    Some(Api {
        is_initialized: get!(c"Py_IsInitialized"),
        gil_check: get!(c"PyGILState_Check"),
        // SAFETY: as in `get!`, when found.
        thread_state: (!state.is_null()).then(|| unsafe { std::mem::transmute(state) }),
        get_frame: get!(c"PyEval_GetFrame"),
        get_code: get!(c"PyFrame_GetCode"),
        get_line: get!(c"PyFrame_GetLineNumber"),
        get_back: get!(c"PyFrame_GetBack"),
        decref: get!(c"Py_DecRef"),
        get_attr: get!(c"PyObject_GetAttrString"),
        as_utf8: get!(c"PyUnicode_AsUTF8AndSize"),
        clear_error: get!(c"PyErr_Clear"),
    })
}

/// What [`status`] says of Python, for the summary.
pub(crate) fn status() -> Option<String> {
    match FOUND.get()? {
        Found::None => None,
        Found::Refused(why) => Some(format!("refused: {why}")),
        Found::Read(v, _) => Some(format!("CPython {v}, frames read while the GIL is held")),
    }
}

/// The innermost Python frames of the calling thread: their code objects (a reference held
/// each, given back when dropped) and lines.
pub(crate) struct Frames {
    api: Option<&'static Api>,
    code: [Object; MAX_FRAMES],
    pub(crate) keys: [(u64, u32); MAX_FRAMES],
    pub(crate) n: usize,
}

impl Frames {
    /// No frames.
    const NONE: Frames = Frames {
        api: None,
        code: [std::ptr::null_mut(); MAX_FRAMES],
        keys: [(0, 0); MAX_FRAMES],
        n: 0,
    };

    /// The frames as text: file, line and function of each, innermost first (for a new site,
    /// while the code objects are held).
    pub(crate) fn resolve(&self) -> Vec<PythonFrame> {
        let Some(api) = self.api else { return Vec::new() };
        let text = |code: Object, attr: &CStr| -> String {
            // SAFETY: a code object this thread holds a reference to, with the GIL held; the
            // attribute is a new reference, given back; the UTF-8 is the string's own, copied
            // before that.
            unsafe {
                let s = (api.get_attr)(code, attr.as_ptr());
                if s.is_null() {
                    (api.clear_error)();
                    return "?".into();
                }
                let mut len = 0isize;
                let p = (api.as_utf8)(s, &mut len);
                let out = if p.is_null() {
                    (api.clear_error)();
                    "?".into()
                } else {
                    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len.max(0) as usize);
                    String::from_utf8_lossy(bytes).into_owned()
                };
                (api.decref)(s);
                out
            }
        };
        (0..self.n)
            .map(|i| PythonFrame {
                file: text(self.code[i], c"co_filename"),
                line: self.keys[i].1,
                function: text(self.code[i], c"co_name"),
            })
            .collect()
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        if let Some(api) = self.api {
            for &code in &self.code[..self.n] {
                // SAFETY: the references `capture` took, given back with the GIL still held.
                unsafe { (api.decref)(code) };
            }
        }
    }
}

/// The calling thread's innermost Python frames (at most `MAX_FRAMES`), when the process runs
/// CPython 3.11 or 3.12 and the thread holds the GIL; none otherwise.
pub(crate) fn capture() -> Frames {
    let Found::Read(_, api) = found() else { return Frames::NONE };
    // SAFETY: CPython's functions: asked whether the interpreter runs and this thread holds
    // the GIL before any frame is read; then, with the GIL held, the thread's frames, each
    // `PyFrame_GetBack` and `PyFrame_GetCode` a new reference, given back (frames here, code
    // objects by `Frames`'s drop).
    unsafe {
        if (api.is_initialized)() == 0
            || api.thread_state.is_some_and(|get| get().is_null())
            || (api.gil_check)() == 0
        {
            return Frames::NONE;
        }
        let mut frames = Frames { api: Some(api), ..Frames::NONE };
        let mut frame = (api.get_frame)();
        let mut owned = false;
        while !frame.is_null() && frames.n < MAX_FRAMES {
            let code = (api.get_code)(frame);
            if code.is_null() {
                break;
            }
            let line = (api.get_line)(frame);
            frames.code[frames.n] = code;
            frames.keys[frames.n] = (code as u64, line.max(0) as u32);
            frames.n += 1;
            let back = (api.get_back)(frame);
            if owned {
                (api.decref)(frame);
            }
            (frame, owned) = (back, true);
        }
        if owned && !frame.is_null() {
            (api.decref)(frame);
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_cpython_3_11_and_3_12_are_read() {
        assert!(super::accepted("3.11.9").is_ok());
        assert!(super::accepted("3.12.3").is_ok());
        for other in ["3.10.12", "3.13.0", "2.7.18", "3.1", ""] {
            let why = super::accepted(other).expect_err(other);
            assert!(why.contains("3.11 and 3.12"), "{why}");
        }
    }
}
