//! The PTX of a cubin that does not keep it, found where Triton keeps it: beside the cubin in its
//! cache. Triton compiles each kernel to `<cache>/<hash>/<name>.ptx` and `<name>.cubin`; a
//! program that loads the cubin (torch.compile's generated code, loading from Triton's or
//! Inductor's cache) gives the driver its bytes only. A cubin file with exactly those bytes, in
//! one of the caches, names the PTX it was made from: `<name>.ptx` in the same folder.
//!
//! The caches are `TRITON_CACHE_DIR` (default `~/.triton/cache`) and Inductor's
//! (`TORCHINDUCTOR_CACHE_DIR`, default `/tmp/torchinductor_<user>`), searched to a depth of
//! [`DEPTH`]. The cubins seen are remembered by size, and the folders searched again only when
//! no cubin of the image's size matches (the program may have compiled new kernels since).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How deep below a cache's root cubins are looked for (Inductor nests Triton's cache).
const DEPTH: usize = 4;

/// The most cubin files remembered (a larger cache is searched no further).
const MAX_FILES: usize = 100_000;

/// Cubin files seen in the caches, by size.
static SEEN: Mutex<BTreeMap<u64, Vec<PathBuf>>> = Mutex::new(BTreeMap::new());

/// The caches' roots, from the environment.
fn roots() -> Vec<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut roots = Vec::new();
    match env("TRITON_CACHE_DIR") {
        Some(dir) => roots.push(dir),
        None => roots.extend(env("HOME").map(|home| home.join(".triton").join("cache"))),
    }
    match env("TORCHINDUCTOR_CACHE_DIR") {
        Some(dir) => roots.push(dir),
        None => {
            let user = env("USER").or_else(|| env("LOGNAME"));
            roots.extend(user.map(|u| {
                let mut name = std::ffi::OsString::from("torchinductor_");
                name.push(u);
                std::env::temp_dir().join(name)
            }));
        }
    }
    roots
}

/// Adds the cubin files under `dir` (to `depth` more levels) to `seen`.
fn scan(dir: &Path, depth: usize, seen: &mut BTreeMap<u64, Vec<PathBuf>>, count: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if *count >= MAX_FILES {
            return;
        }
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() && depth > 0 {
            scan(&path, depth - 1, seen, count);
        } else if kind.is_file()
            && path.extension().is_some_and(|e| e == "cubin")
            && let Ok(meta) = entry.metadata()
        {
            let paths = seen.entry(meta.len()).or_default();
            if !paths.contains(&path) {
                paths.push(path);
                *count += 1;
            }
        }
    }
}

/// The PTX beside a cubin file in a cache whose bytes are `cubin`'s, if there is one.
pub(super) fn ptx_beside(cubin: &[u8]) -> Option<String> {
    let size = cubin.len() as u64;
    let found = |seen: &BTreeMap<u64, Vec<PathBuf>>| {
        let paths = seen.get(&size)?;
        let same = paths.iter().find(|p| std::fs::read(p).is_ok_and(|b| b == cubin))?;
        std::fs::read_to_string(same.with_extension("ptx")).ok()
    };
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ptx) = found(&seen) {
        return Some(ptx);
    }
    let mut count = seen.values().map(Vec::len).sum();
    for root in roots() {
        scan(&root, DEPTH, &mut seen, &mut count);
    }
    found(&seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_finds_the_ptx_beside_its_file_and_no_other() {
        let root = std::env::temp_dir().join(format!("egpu-caches-{}", std::process::id()));
        let folder = root.join("a").join("HASH");
        std::fs::create_dir_all(&folder).expect("a folder");
        std::fs::write(folder.join("k.cubin"), b"\x7fELF one").expect("a cubin");
        std::fs::write(folder.join("k.ptx"), ".version 9.0\n").expect("its PTX");
        std::fs::write(folder.join("j.cubin"), b"\x7fELF two").expect("another, same size");
        let mut seen = BTreeMap::new();
        let mut count = 0;
        scan(&root, DEPTH, &mut seen, &mut count);
        assert_eq!(count, 2);
        // Through the index alone (the environment's roots are the user's).
        *SEEN.lock().expect("the index") = seen;
        assert_eq!(ptx_beside(b"\x7fELF one").as_deref(), Some(".version 9.0\n"));
        assert_eq!(ptx_beside(b"\x7fELF two"), None, "no PTX beside it");
        assert_eq!(ptx_beside(b"\x7fELF six"), None, "no such cubin");
        let _ = std::fs::remove_dir_all(&root);
    }
}
