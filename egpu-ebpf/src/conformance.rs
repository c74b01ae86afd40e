//! Reading the bpf_conformance suite, the yardstick of every engine.
//!
//! Each `.data` file holds a program in the assembler syntax of [`crate::asm`] (`-- asm`),
//! optional input memory as hex bytes (`-- mem`), and the expected `r0` (`-- result`) or an
//! expected error (`-- error`). As bpf_conformance's own runner does, an engine runs the program
//! with `r1` pointing at the memory and `r2` holding its length; [`Case::program`] builds that
//! program (a `mov %r2, len` before the file's code, a user attach point as large as the memory).
//!
//! The suite is kept in the repository, at `tests/conformance` (with its licence), and read from
//! there, or from where `EGPU_CONFORMANCE_DIR` points ([`suite`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{AttachPoint, Program, assemble};

/// One file of the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The file name, such as `add.data`.
    pub name: String,
    /// The program text.
    pub asm: String,
    /// The input memory.
    pub mem: Vec<u8>,
    /// What running it must give.
    pub expect: Expect,
}

/// What running a case must give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// This value in `r0`.
    Result(u64),
    /// An error, at load or at run time.
    Error,
}

impl Case {
    /// Reads one file's text.
    pub fn parse(name: &str, text: &str) -> Result<Case, String> {
        let mut sections: BTreeMap<&str, String> = BTreeMap::new();
        let mut current = None;
        for line in text.lines() {
            if let Some(section) = line.strip_prefix("-- ") {
                current = Some(section.trim());
                sections.entry(section.trim()).or_default();
                continue;
            }
            if let Some(body) = current.and_then(|s| sections.get_mut(s)) {
                body.push_str(line);
                body.push('\n');
            }
        }
        let mem = match sections.get("mem") {
            Some(m) => m
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).map_err(|_| format!("{name}: bad byte `{b}`")))
                .collect::<Result<Vec<u8>, String>>()?,
            None => Vec::new(),
        };
        let expect = match sections.get("result") {
            Some(r) => {
                let r = r.trim();
                let v = match r.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => r.parse(),
                };
                Expect::Result(v.map_err(|_| format!("{name}: bad result `{r}`"))?)
            }
            None if sections.contains_key("error") => Expect::Error,
            None => return Err(format!("{name}: no `-- result` or `-- error`")),
        };
        let asm = sections.get("asm").cloned().ok_or_else(|| format!("{name}: no `-- asm`"))?;
        Ok(Case { name: name.to_string(), asm, mem, expect })
    }

    /// The program as engines run it: `r2` set to the memory's length, then the file's code,
    /// attached to a user context as large as the memory.
    pub fn program(&self) -> Result<Program, String> {
        let source = format!("mov %r2, {}\n{}", self.mem.len(), self.asm);
        let slots = assemble(&source).map_err(|e| format!("assembler: {e}"))?;
        let attach = AttachPoint::User { ctx_size: self.mem.len() as u32 };
        Program::new(slots, vec![], attach).map_err(|e| format!("program: {e}"))
    }
}

/// The suite's folder: `EGPU_CONFORMANCE_DIR`, else `tests/conformance` in `workspace`.
///
/// `None`, after printing why, when it is missing; a panic instead when
/// `EGPU_REQUIRE_CONFORMANCE=1` (set by the project's test script), so a test run that needs the
/// suite cannot pass without it.
pub fn suite_dir(workspace: &Path) -> Option<PathBuf> {
    let dir = match std::env::var_os("EGPU_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => workspace.join("tests/conformance"),
    };
    if dir.is_dir() {
        return Some(dir);
    }
    let why = format!(
        "the conformance suite is not at {} (set EGPU_CONFORMANCE_DIR to the `tests` folder of \
         github.com/Alan-Jowett/bpf_conformance)",
        dir.display()
    );
    if std::env::var("EGPU_REQUIRE_CONFORMANCE").as_deref() == Ok("1") {
        panic!("{why}; EGPU_REQUIRE_CONFORMANCE=1 is set");
    }
    eprintln!("egpu: skipping conformance: {why}");
    None
}

/// Every case of the suite found from `workspace` (see [`suite_dir`]), sorted by name; `None`
/// when the suite is missing and not required.
pub fn suite(workspace: &Path) -> Option<Result<Vec<Case>, String>> {
    let dir = suite_dir(workspace)?;
    Some((|| {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "data"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
                let text =
                    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
                Case::parse(&name, &text)
            })
            .collect()
    })())
}

/// Failures of engines, by (engine, file), with why.
pub type Failures = BTreeMap<(String, String), String>;

/// Compares the failures of `engines` with those listed in `tests/conformance-failures.txt` of
/// `workspace` (lines `<engine> <file> <reason>`): an error names every failure not listed and
/// every listed failure of these engines that now passes, and every listed line without a reason.
pub fn check_listed(workspace: &Path, engines: &[&str], failed: &Failures) -> Result<(), String> {
    let path = workspace.join("tests/conformance-failures.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut listed = Failures::new();
    for l in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let mut parts = l.splitn(3, ' ');
        let engine = parts.next().unwrap_or_default().to_string();
        let file = parts.next().unwrap_or_default().to_string();
        let reason = parts.next().unwrap_or_default().trim().to_string();
        if reason.is_empty() {
            return Err(format!("{}: `{l}` gives no reason", path.display()));
        }
        if engines.contains(&engine.as_str()) {
            listed.insert((engine, file), reason);
        }
    }
    let unlisted: Vec<_> = failed.keys().filter(|k| !listed.contains_key(*k)).collect();
    let fixed: Vec<_> = listed.keys().filter(|k| !failed.contains_key(*k)).collect();
    if unlisted.is_empty() && fixed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "failures not listed in {}: {unlisted:?}; listed but now passing (remove them): {fixed:?}",
        path.display()
    ))
}
