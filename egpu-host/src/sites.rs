//! Launch sites: where in a program its launches and copies come from (issue 28).
//!
//! When the preloaded library captures launch sites (`EGPU_SITES`), each sampled launch or copy
//! takes the launching thread's stack: its return addresses (by frame pointers, at most
//! [`MAX_FRAMES`]) and, when the thread runs Python (the GIL held or not), its innermost Python
//! frames (file, line, function). A stack is interned to a site id ([`site_id`], a 64-bit hash
//! of its frames, never 0), which the context's `site_id` carries; the first time an id is seen
//! its frames go into the process's [`SiteTable`], two hash maps in shared memory
//! (`egpu-<pid>-sites`, `egpu-<pid>-site_frames`) that another process (`egpu run`, `egpu
//! maps`) opens by name. Nothing is symbolised on the hot path: the table holds addresses
//! ([`SiteRecord`]), and the Python frames as text, made once per new site; [`SiteTable::render`]
//! names the addresses with a resolver the reader gives (`dladdr` in the process at its exit,
//! ELF symbols through `/proc/PID/maps` in another).

use std::fmt::Write as _;

use bytemuck::{Pod, Zeroable};
use egpu_maps::{HashMap, MapError, Placement};

/// Native frames a site keeps, at most.
pub const MAX_FRAMES: usize = 30;
/// Bytes of Python frames' text a site keeps, at most.
pub const PYTHON_TEXT: usize = 1024;
/// Sites a process's table holds, at most.
pub const CAPACITY: u32 = 4096;
/// The table's maps' names (`egpu-<pid>-NAME` in shared memory).
pub const MAPS: [&str; 2] = ["sites", "site_frames"];

/// A site's native frames: return addresses, innermost first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct SiteRecord {
    /// How many of `frames` hold addresses.
    pub depth: u32,
    /// How many Python frames the site has (their text in the second map).
    pub python: u32,
    /// Return addresses, innermost (the caller of the CUDA function) first.
    pub frames: [u64; MAX_FRAMES],
}

impl SiteRecord {
    /// The record of `frames` (at most [`MAX_FRAMES`] kept) and `python` Python frames.
    pub fn new(frames: &[u64], python: u32) -> SiteRecord {
        let mut r = SiteRecord::zeroed();
        let n = frames.len().min(MAX_FRAMES);
        r.frames[..n].copy_from_slice(&frames[..n]);
        r.depth = n as u32;
        r.python = python;
        r
    }

    /// The addresses it holds.
    pub fn addresses(&self) -> &[u64] {
        &self.frames[..(self.depth as usize).min(MAX_FRAMES)]
    }
}

/// One Python frame of a site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFrame {
    /// The code's file (`co_filename`).
    pub file: String,
    /// The line the frame is at.
    pub line: u32,
    /// The code's name (`co_name`).
    pub function: String,
}

/// The id of a site whose native frames are `native` and whose Python frames are known by
/// `python` (each frame's code object's address and where in its code it is, its line or its
/// instruction: what the hot path reads; the text is read once per new site): FNV-1a over the
/// words, never 0.
pub fn site_id(native: &[u64], python: &[(u64, u32)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut add = |w: u64| {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for &a in native {
        add(a);
    }
    add(u64::MAX);
    for &(code, at) in python {
        add(code);
        add(u64::from(at));
    }
    h.max(1)
}

/// Python frames as the table keeps them: `file:line:function` lines, innermost first, cut
/// at [`PYTHON_TEXT`] bytes (whole lines only).
pub fn python_text(frames: &[PythonFrame]) -> [u8; PYTHON_TEXT] {
    let mut out = [0u8; PYTHON_TEXT];
    let mut at = 0;
    for f in frames {
        let line = format!("{}:{}:{}\n", f.file, f.line, f.function);
        if at + line.len() > PYTHON_TEXT {
            break;
        }
        out[at..at + line.len()].copy_from_slice(line.as_bytes());
        at += line.len();
    }
    out
}

/// The Python frames of [`python_text`]'s bytes.
pub fn python_frames(text: &[u8]) -> Vec<PythonFrame> {
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    String::from_utf8_lossy(&text[..end])
        .lines()
        .filter_map(|l| {
            // The file may hold `:`; the function may not, nor the line.
            let (rest, function) = l.rsplit_once(':')?;
            let (file, line) = rest.rsplit_once(':')?;
            Some(PythonFrame {
                file: file.to_string(),
                line: line.parse().ok()?,
                function: function.to_string(),
            })
        })
        .collect()
}

/// A process's interned sites (see the module documentation).
#[derive(Debug)]
pub struct SiteTable {
    sites: HashMap<u64, SiteRecord>,
    python: HashMap<u64, [u8; PYTHON_TEXT]>,
}

impl SiteTable {
    /// Creates process `pid`'s table, in shared memory when `shared` (else, or when shared
    /// memory cannot be had, in process memory).
    pub fn create(pid: u32, shared: bool) -> Result<SiteTable, MapError> {
        fn make<V: Pod>(pid: u32, name: &str, shared: bool) -> Result<HashMap<u64, V>, MapError> {
            if shared {
                let name = crate::builtin::shared_name(pid, name);
                let _ = egpu_maps::unlink_shared(&name);
                if let Ok(m) = HashMap::create(CAPACITY, Placement::Shared(name.into())) {
                    return Ok(m);
                }
            }
            HashMap::create(CAPACITY, Placement::Process)
        }
        Ok(SiteTable { sites: make(pid, MAPS[0], shared)?, python: make(pid, MAPS[1], shared)? })
    }

    /// Opens process `pid`'s table, in shared memory.
    pub fn open(pid: u32) -> Result<SiteTable, MapError> {
        let name = |m| crate::builtin::shared_name(pid, m);
        Ok(SiteTable {
            sites: HashMap::open_shared(&name(MAPS[0]))?,
            python: HashMap::open_shared(&name(MAPS[1]))?,
        })
    }

    /// Whether site `id` is in the table (a lock-free lookup, no copy).
    pub fn contains(&self, id: u64) -> bool {
        self.sites.contains_key(&id)
    }

    /// Puts site `id` in the table: its native frames and, when it has some, its Python
    /// frames' text. A full table refuses it ([`MapError::Full`]).
    pub fn insert(
        &self,
        id: u64,
        record: &SiteRecord,
        python: Option<&[u8; PYTHON_TEXT]>,
    ) -> Result<(), MapError> {
        // The text first: a reader that finds the record finds its text.
        if let Some(text) = python {
            self.python.insert(&id, text)?;
        }
        self.sites.insert(&id, record)
    }

    /// The sites, by id.
    pub fn sites(&self) -> Vec<(u64, SiteRecord, Vec<PythonFrame>)> {
        let mut all: Vec<_> = self
            .sites
            .iter()
            .map(|(id, r)| {
                let py = if r.python > 0 {
                    self.python.get(&id).map(|t| python_frames(&t)).unwrap_or_default()
                } else {
                    Vec::new()
                };
                (id, r, py)
            })
            .collect();
        all.sort_by_key(|s| s.0);
        all
    }

    /// Sites refused because the table was full.
    pub fn refused(&self) -> u64 {
        self.sites.refused()
    }

    /// The report's lines of every site: `site ID native F <- F …` with each address named by
    /// `name` (`symbol+0xOFFSET`, say), and `site ID python FILE:LINE:FUNCTION <- …` for those
    /// with Python frames; innermost frames first.
    pub fn render(&self, name: impl Fn(u64) -> String) -> String {
        let mut text = String::new();
        for (id, record, python) in self.sites() {
            let native: Vec<String> = record.addresses().iter().map(|&a| name(a)).collect();
            let _ = writeln!(text, "site {id} native {}", native.join(" <- "));
            if !python.is_empty() {
                let frames: Vec<String> = python
                    .iter()
                    .map(|f| format!("{}:{}:{}", f.file, f.line, f.function))
                    .collect();
                let _ = writeln!(text, "site {id} python {}", frames.join(" <- "));
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_interned_by_their_frames_and_read_back() {
        let table = SiteTable::create(std::process::id(), false).expect("the table");
        let py = [
            PythonFrame { file: "/srv/app:v2.py".into(), line: 12, function: "launch".into() },
            PythonFrame { file: "<stdin>".into(), line: 1, function: "<module>".into() },
        ];
        let a = site_id(&[0x1000, 0x2000], &[(0x7f00, 12), (0x7f80, 1)]);
        let b = site_id(&[0x1000, 0x2000], &[(0x7f00, 13), (0x7f80, 1)]);
        let c = site_id(&[0x1000, 0x2001], &[]);
        assert!(a != b && b != c && a != 0);
        assert!(!table.contains(a));
        table.insert(a, &SiteRecord::new(&[0x1000, 0x2000], 2), Some(&python_text(&py))).unwrap();
        table.insert(c, &SiteRecord::new(&[0x1000, 0x2001], 0), None).unwrap();
        assert!(table.contains(a) && table.contains(c));
        let sites = table.sites();
        let (_, record, frames) = sites.iter().find(|s| s.0 == a).expect("site a");
        assert_eq!(record.addresses(), [0x1000, 0x2000]);
        assert_eq!(frames, &py);
        let text = table.render(|addr| format!("f{addr:x}"));
        assert!(text.contains(&format!("site {a} native f1000 <- f2000\n")), "{text}");
        assert!(text.contains(&format!("site {a} python /srv/app:v2.py:12:launch <- ")), "{text}");
        assert!(text.contains(&format!("site {c} native f1000 <- f2001\n")), "{text}");
    }

    /// This test binary's own functions are found by their addresses, wherever it was loaded.
    #[test]
    fn elf_symbols_name_the_functions_of_a_running_program() {
        let exe = std::env::current_exe().expect("this test");
        let symbols = ElfSymbols::read(&exe).expect("an ELF file");
        let here = elf_symbols_name_the_functions_of_a_running_program as *const () as u64;
        // The load base: this function's run-time address less its address in the file.
        let (name, offset) = symbols
            .functions
            .iter()
            .find(|f| f.2.contains("elf_symbols_name_the_functions_of_a_running_program"))
            .map(|f| (f.2.clone(), f.0))
            .expect("the function in the symbol table");
        let base = if symbols.relative { here - offset } else { 0 };
        assert_eq!(symbols.find(here + 3, base), Some((name.as_str(), 3)));
        assert_eq!(symbols.find(0, base), None);
    }

    #[test]
    fn long_python_stacks_keep_whole_lines() {
        let deep: Vec<PythonFrame> = (0..100)
            .map(|i| PythonFrame { file: format!("f{i}.py"), line: i, function: "g".into() })
            .collect();
        let back = python_frames(&python_text(&deep));
        assert!(back.len() > 50 && back.len() < 100);
        assert_eq!(back[..], deep[..back.len()]);
    }
}

/// The function symbols of an ELF file (its `.symtab`, else its `.dynsym`), for naming a site's
/// addresses where the loader's tables do not (an executable linked without `-rdynamic`):
/// what a reader symbolises with, in the process (`dladdr` first) or in another one (the
/// object's load base from `/proc/PID/maps`).
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// Start, size, name; by start.
    functions: Vec<(u64, u64, String)>,
    /// Whether addresses are the run-time ones less the load base (a shared object or PIE).
    relative: bool,
}

impl ElfSymbols {
    /// Reads the function symbols of the 64-bit ELF file at `path`.
    pub fn read(path: &std::path::Path) -> Option<ElfSymbols> {
        use object::{Object, ObjectKind, ObjectSymbol, SymbolKind};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut functions: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        functions.sort();
        functions.dedup_by_key(|f| f.0);
        Some(ElfSymbols { functions, relative: file.kind() == ObjectKind::Dynamic })
    }

    /// The function that holds `address`, of an object loaded at `base`: its name and the
    /// address's offset in it.
    pub fn find(&self, address: u64, base: u64) -> Option<(&str, u64)> {
        let at = if self.relative { address.wrapping_sub(base) } else { address };
        let i = self.functions.partition_point(|f| f.0 <= at).checked_sub(1)?;
        let (start, size, name) = &self.functions[i];
        (at - start < (*size).max(1)).then_some((name.as_str(), at - start))
    }
}
