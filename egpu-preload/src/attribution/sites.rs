//! Launch sites: the sampling (one call in `N` per thread), the capture, the process's table
//! of interned sites, and their lines in the summary, symbolised at exit with `dladdr`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use egpu::host::sites::{self, ElfSymbols, SiteRecord, SiteTable};

use super::{SITES, python, stack};
use crate::defaults::HOT;

/// Calls per sampled one (0: sites off).
static EVERY: AtomicU32 = AtomicU32::new(0);
/// Native frames kept, at most.
static DEPTH: AtomicU32 = AtomicU32::new(16);

/// Counts, for the summary: calls sampled, by the trampoline's frame or by the unwinder, new
/// sites, sites the table refused.
static SAMPLED: AtomicU64 = AtomicU64::new(0);
static UNWOUND: AtomicU64 = AtomicU64::new(0);
static NEW: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// The process's table (remade in a child of `fork`: its pid), `None` when it cannot be made.
static TABLE: Mutex<Option<(u32, Option<&'static SiteTable>)>> = Mutex::new(None);

pub(crate) fn configure() {
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
    if let Some(depth) = number("EGPU_SITES_DEPTH") {
        DEPTH.store(depth.clamp(1, sites::MAX_FRAMES as u32), Ordering::Relaxed);
    }
    set_every(number("EGPU_SITES").unwrap_or(0));
}

/// Captures one call in `every` per thread from now on (0: none); the previous setting.
pub(crate) fn set_every(every: u32) -> u32 {
    if every == 0 {
        HOT.attribution.fetch_and(!SITES, Ordering::Relaxed);
    } else {
        HOT.attribution.fetch_or(SITES, Ordering::Relaxed);
    }
    EVERY.swap(every, Ordering::Relaxed)
}

/// The site of the call being observed when this thread's sampling picks it, else 0.
pub(crate) fn sampled(local: &crate::Local) -> u64 {
    let left = local.attr.countdown.get();
    if left > 1 {
        local.attr.countdown.set(left - 1);
        local.attr.frame.set((0, 0));
        return 0;
    }
    local.attr.countdown.set(EVERY.load(Ordering::Relaxed));
    capture(local)
}

/// The site of the call being observed: its stack, interned.
fn capture(local: &crate::Local) -> u64 {
    SAMPLED.fetch_add(1, Ordering::Relaxed);
    let mut native = [0u64; sites::MAX_FRAMES];
    let depth = (DEPTH.load(Ordering::Relaxed) as usize).min(sites::MAX_FRAMES);
    let (fp, ret) = local.attr.frame.replace((0, 0));
    let n = if ret != 0 {
        stack::walk(fp, ret, local, &mut native[..depth])
    } else {
        UNWOUND.fetch_add(1, Ordering::Relaxed);
        stack::unwind(&mut native[..depth])
    };
    let py = python::capture();
    let id = sites::site_id(&native[..n], &py.keys[..py.n]);
    if local.attr.last_site.replace(id) != id {
        intern(id, &native[..n], &py);
    }
    id
}

/// Puts site `id` in the process's table unless it is there.
#[cold]
#[inline(never)]
fn intern(id: u64, native: &[u64], py: &python::Frames) {
    let Some(table) = table() else { return };
    if table.contains(id) {
        return;
    }
    let text = (py.n > 0).then(|| sites::python_text(&py.resolve()));
    match table.insert(id, &SiteRecord::new(native, py.n as u32), text.as_ref()) {
        Ok(()) => NEW.fetch_add(1, Ordering::Relaxed),
        Err(_) => REFUSED.fetch_add(1, Ordering::Relaxed),
    };
}

/// The process's table, made at the first new site.
fn table() -> Option<&'static SiteTable> {
    let pid = std::process::id();
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    match *table {
        Some((p, t)) if p == pid => t,
        _ => {
            let shared = std::env::var_os("EGPU_SHARED").is_none_or(|v| v != "0");
            // Never dropped: a parent's, in a child, would remove the parent's objects.
            let made = SiteTable::create(pid, shared).ok().map(|t| &*Box::leak(Box::new(t)));
            *table = Some((pid, made));
            made
        }
    }
}

/// The summary's lines: the counts, then each site with its frames named (see
/// `egpu::host::sites::SiteTable::render`); nothing when sites were never captured.
pub(crate) fn summary() -> String {
    let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let every = EVERY.load(Ordering::Relaxed);
    let mut text = String::new();
    if every == 0 && SAMPLED.load(Ordering::Relaxed) == 0 {
        return text;
    }
    let _ = writeln!(
        text,
        "sites every {every} sampled {} unwound {} new {} refused {}",
        SAMPLED.load(Ordering::Relaxed),
        UNWOUND.load(Ordering::Relaxed),
        NEW.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    );
    if let Some(status) = python::status() {
        let _ = writeln!(text, "sites python {status}");
    }
    if let Some((pid, Some(t))) = *table
        && pid == std::process::id()
    {
        text.push_str(&t.render(symbol));
    }
    text
}

/// Each site's frames by function, innermost first: its native frames' functions (`symbol`'s
/// names without their offsets), then its Python frames as `file:line:function`, for the
/// GPU time's flame graph (`gpu_time`); at exit.
pub(crate) fn frames() -> Vec<(u64, Vec<String>)> {
    let table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let Some((pid, Some(t))) = *table else { return Vec::new() };
    if pid != std::process::id() {
        return Vec::new();
    }
    let function = |a: u64| {
        let name = symbol(a);
        name.rsplit_once("+0x").map_or(name.as_str(), |(f, _)| f).replace(';', ":")
    };
    t.sites()
        .into_iter()
        .map(|(id, record, python)| {
            let native = record.addresses().iter().map(|&a| function(a));
            let python = python.iter().map(|f| format!("{}:{}:{}", f.file, f.line, f.function));
            (id, native.chain(python.map(|f| f.replace(';', ":"))).collect())
        })
        .collect()
}

/// A return address named as `symbol+0xOFFSET` (of the call before it): by the loader's
/// symbols (`dladdr`), else by the object's ELF symbols (an executable linked without
/// `-rdynamic`), else `object+0xOFFSET`, or its number.
fn symbol(address: u64) -> String {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // The call instruction, not the one after it (which may be another function's).
    let at = address.saturating_sub(1) as usize as *const libc::c_void;
    // SAFETY: dladdr writes `info` for any address.
    if unsafe { libc::dladdr(at, info.as_mut_ptr()) } == 0 {
        return format!("{address:#x}");
    }
    // SAFETY: written by dladdr, which returned non-zero.
    let info = unsafe { info.assume_init() };
    let text = |p: *const libc::c_char| {
        // SAFETY: the loader's NUL-terminated names, alive while the object is loaded.
        (!p.is_null())
            .then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    if let Some(name) = text(info.dli_sname).filter(|n| !n.is_empty()) {
        return format!("{name}+{:#x}", address - info.dli_saddr as u64);
    }
    let Some(file) = text(info.dli_fname) else { return format!("{address:#x}") };
    let base = info.dli_fbase as u64;
    if let Some((name, offset)) = elf_symbol(&file, address - 1, base) {
        return format!("{name}+{:#x}", offset + 1);
    }
    let short = file.rsplit('/').next().unwrap_or_default().to_string();
    format!("{short}+{:#x}", address - base)
}

/// The function of the object `file` (loaded at `base`) that holds `address`, by its ELF
/// symbols, read once per object (at exit: never on a call's way).
fn elf_symbol(file: &str, address: u64, base: u64) -> Option<(String, u64)> {
    static READ: Mutex<Vec<(String, Option<ElfSymbols>)>> = Mutex::new(Vec::new());
    let mut read = READ.lock().unwrap_or_else(|p| p.into_inner());
    if !read.iter().any(|(f, _)| f == file) {
        // The main program's name is the command's (`argv[0]`), maybe no path at all.
        let path = if file.contains('/') && std::path::Path::new(file).exists() {
            std::path::PathBuf::from(file)
        } else {
            std::path::PathBuf::from("/proc/self/exe")
        };
        read.push((file.to_string(), ElfSymbols::read(&path)));
    }
    let symbols = read.iter().find(|(f, _)| f == file)?.1.as_ref()?;
    symbols.find(address, base).map(|(name, offset)| (name.to_string(), offset))
}
