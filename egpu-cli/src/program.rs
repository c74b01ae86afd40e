//! One way to name a program, for every subcommand that takes one.
//!
//! A PROGRAM is a file, told apart by what it holds: an eBPF ELF object as clang makes them (its
//! programs a pack's probes, `egpu::host::elf`), a shared library (ELF) that exports a probe
//! pack (`egpu::export_probes!`), a pack's text (`egpu-probes 2` first), eBPF assembly text
//! (bpf_conformance's syntax), or bytecode (little-endian 8-byte instructions, as
//! `Program::to_bytes` writes them). `PACK:NAME` names one probe of a pack; a file whose whole
//! name has a colon is still found by that name.
//!
//! Assembly and bytecode take their attach point and map table from the command line (`--map`),
//! and the maps declared are checked against the program's use: a key or value the program
//! writes wider than its map's declared size is refused (the map would keep only part of it).
//! A pack's probes carry their attach points and maps.

use std::path::{Path, PathBuf};

use egpu::ebpf::helpers::{ArgKind, helper};
use egpu::ebpf::instruction::{CallTarget, Instruction};
use egpu::ebpf::verifier::{AccessRegion, Verified, verify};
use egpu::ebpf::{AttachPoint, MapDef, Program, assemble};
use egpu::pack::Pack;
use egpu_device::inject::Sample;
use egpu_device::translate::DeviceMap;

use crate::Error;
use crate::args::MapFlag;

/// A program as named on the command line: a file, and a probe of it when it is a pack.
#[derive(Clone, Debug)]
pub(crate) struct ProgramName {
    /// The file.
    pub(crate) path: PathBuf,
    /// `NAME` of `PACK:NAME`.
    pub(crate) probe: Option<String>,
}

impl ProgramName {
    /// Reads `PATH` or `PATH:NAME` (a file whose whole name exists is that file).
    pub(crate) fn parse(text: &str) -> ProgramName {
        if !Path::new(text).exists()
            && let Some((path, probe)) = text.rsplit_once(':')
            && !probe.is_empty()
            && !probe.contains('/')
            && !path.is_empty()
        {
            return ProgramName { path: path.into(), probe: Some(probe.into()) };
        }
        ProgramName { path: text.into(), probe: None }
    }
}

impl std::fmt::Display for ProgramName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.probe {
            Some(probe) => write!(f, "{}:{probe}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// What a program file holds.
pub(crate) enum Contents {
    /// Instructions alone, without attach point or maps.
    Code(Code),
    /// A probe pack.
    Pack(Pack),
}

/// A program's instructions.
pub(crate) enum Code {
    /// From eBPF assembly text.
    Assembly(Vec<egpu::ebpf::Insn>),
    /// Bytecode, as read.
    Bytecode(Vec<u8>),
}

/// Reads the file `name` names, and tells what it holds.
pub(crate) fn read(name: &ProgramName) -> Result<Contents, Error> {
    let path = &name.path;
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| reading(name, &e))?;
    if is_pack(&bytes) {
        return load_pack(path).map(Contents::Pack);
    }
    if name.probe.is_some() {
        return Err(Error::Failed(format!(
            "{name}: {shown} is not a probe pack, so it has no probe to name (PACK:NAME)"
        )));
    }
    match std::str::from_utf8(&bytes).ok().filter(|t| !t.contains('\0')) {
        Some(text) => assemble(text)
            .map(|slots| Contents::Code(Code::Assembly(slots)))
            .map_err(|e| Error::Failed(format!("{shown}: {e}"))),
        None => Ok(Contents::Code(Code::Bytecode(bytes))),
    }
}

/// Reads the pack `name` names (`egpu run --probes`); any other file is refused by name.
pub(crate) fn read_pack(name: &ProgramName) -> Result<Pack, Error> {
    let shown = name.path.display();
    let bytes = std::fs::read(&name.path).map_err(|e| reading(name, &e))?;
    if !is_pack(&bytes) {
        return Err(Error::Failed(format!(
            "{shown}: not a probe pack (a pack's text starts with `egpu-probes 2`; a shared \
             library exports one with egpu::export_probes!)"
        )));
    }
    load_pack(&name.path)
}

/// A file that could not be read, with the probe named after it, if any.
fn reading(name: &ProgramName, e: &std::io::Error) -> Error {
    let shown = name.path.display();
    match &name.probe {
        Some(probe) => Error::Failed(format!("reading {shown} (for its probe `{probe}`): {e}")),
        None => Error::Failed(format!("reading {shown}: {e}")),
    }
}

/// Whether `bytes` are a pack: an eBPF ELF object or a shared library (ELF), or a pack's text.
fn is_pack(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF") || bytes.trim_ascii_start().starts_with(b"egpu-probes")
}

/// `Pack::load`, with the file named in every error.
fn load_pack(path: &Path) -> Result<Pack, Error> {
    // `Pack::load`'s errors name the file when reading it failed, not when its text is bad.
    Pack::load(path).map_err(|e| match e {
        egpu::pack::PackError::Load { .. } => Error::Failed(e.to_string()),
        e => Error::Failed(format!("{}: {e}", path.display())),
    })
}

/// A program ready for an engine: verified, with its maps' places on the GPU.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The program as named (for messages).
    pub(crate) name: String,
    /// The verified program.
    pub(crate) verified: Verified,
    /// Its map table's layouts and addresses, in order.
    pub(crate) bindings: Vec<DeviceMap>,
    /// The warps it runs in (a pack's `warps N` or `blocks N`; every warp otherwise).
    pub(crate) sample: Sample,
}

/// Makes the verified program of assembly or bytecode `code`, for `attach`, with `maps` as its
/// map table, and checks the maps against the program's use.
pub(crate) fn from_code(
    name: &ProgramName,
    code: Code,
    attach: AttachPoint,
    maps: &[MapFlag],
) -> Result<Loaded, Error> {
    let shown = name.path.display();
    let defs: Vec<MapDef> = maps.iter().map(|m| m.def.clone()).collect();
    let program = match code {
        Code::Assembly(slots) => Program::new(slots, defs, attach),
        Code::Bytecode(bytes) => Program::from_bytes(&bytes, defs, attach),
    }
    .map_err(|e| Error::Failed(format!("{shown}: {e}")))?;
    let verified = verify(&program)
        .map_err(|e| Error::Failed(format!("{shown}: the verifier refused it: {e}")))?;
    check_widths(&verified).map_err(|why| Error::Failed(format!("{shown}: {why}")))?;
    Ok(Loaded {
        name: name.to_string(),
        verified,
        bindings: maps.iter().map(|m| m.binding).collect(),
        sample: Sample::EVERY,
    })
}

/// Where `egpu inject` and `egpu translate` place a pack's first map.
pub(crate) const PLACEHOLDER_BASE: u64 = 0x7f00_0000_0000;
/// The distance between two maps' placeholder addresses.
pub(crate) const PLACEHOLDER_STRIDE: u64 = 1 << 32;

/// The probes of `pack` that `name` selects (its `:NAME`, or every probe), as loaded programs
/// with the pack's maps at placeholder addresses: one per map name, [`PLACEHOLDER_STRIDE`]
/// apart from [`PLACEHOLDER_BASE`], so that probes sharing a map share its address, as in a
/// process, and the code is the code a process would run (with other constants).
pub(crate) fn from_pack(name: &ProgramName, pack: &Pack) -> Result<Vec<Loaded>, Error> {
    let probes = pack.probes();
    let chosen: Vec<_> = match &name.probe {
        Some(probe) => {
            let found = probes.iter().find(|p| &p.name == probe).ok_or_else(|| {
                Error::Failed(format!(
                    "{}: no probe `{probe}` (it has {})",
                    name.path.display(),
                    names(pack)
                ))
            })?;
            vec![found]
        }
        None => probes.iter().collect(),
    };
    let mut names: Vec<String> = Vec::new();
    let mut address = |map: &str| {
        let k = names.iter().position(|n| n == map).unwrap_or_else(|| {
            names.push(map.to_owned());
            names.len() - 1
        });
        PLACEHOLDER_BASE + k as u64 * PLACEHOLDER_STRIDE
    };
    Ok(chosen
        .into_iter()
        .map(|p| Loaded {
            name: format!("{}:{}", name.path.display(), p.name),
            verified: p.program.clone(),
            sample: p.sample,
            bindings: p
                .maps
                .iter()
                .zip(p.program.program().maps())
                .map(|(&geometry, def)| DeviceMap {
                    addr: address(&def.name),
                    geometry,
                    live: false,
                    spread: 0,
                    drained: false,
                })
                .collect(),
        })
        .collect())
}

/// The names of a pack's probes, for messages: "`a` (device::kernel_entry), `b` (...)".
pub(crate) fn names(pack: &Pack) -> String {
    if pack.probes().is_empty() {
        return "no probes".into();
    }
    pack.probes()
        .iter()
        .map(|p| format!("`{}` ({})", p.name, p.program.program().attach_point()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses a program whose maps are declared narrower than what it writes into a key or value:
/// for each map helper's key (and value) argument on the stack at a constant offset, the last
/// store before the call (in slot order, in the same function) that writes into those bytes
/// must end within them. A store that runs past their end writes a wider key than the map
/// keeps, which the map would silently cut.
pub(crate) fn check_widths(verified: &Verified) -> Result<(), String> {
    let program = verified.program();
    let decoded = program.decoded();
    for (i, d) in decoded.iter().enumerate() {
        let Instruction::Call(CallTarget::Helper(id)) = d.insn else { continue };
        let (Some(info), Some(facts)) = (helper(id), verified.call(d.pc)) else { continue };
        let Some(def) = facts.map.and_then(|m| program.maps().get(m as usize)) else { continue };
        for (arg, kind) in info.args.iter().map(|a| a.kind).enumerate() {
            let (what, size) = match kind {
                ArgKind::MapKey => ("keys", def.key_size),
                ArgKind::MapValue => ("values", def.value_size),
                _ => continue,
            };
            let Some(access) = facts.args.get(arg).copied().flatten() else { continue };
            let (AccessRegion::OwnStack, Some(start)) = (access.region, access.offset) else {
                continue;
            };
            let end = start + i64::from(size);
            let function = program.functions().iter().find(|f| (f.start..f.end).contains(&d.pc));
            let first = function.map_or(0, |f| f.start);
            // The last store before the call that writes into [start, end).
            let last = decoded[..i].iter().rev().take_while(|s| s.pc >= first).find_map(|s| {
                let bytes = match s.insn {
                    Instruction::Store { size, .. } | Instruction::Atomic { size, .. } => {
                        i64::from(size.bytes())
                    }
                    _ => return None,
                };
                let at = verified.access(s.pc)?;
                let (AccessRegion::OwnStack, Some(at)) = (at.region, at.offset) else {
                    return None;
                };
                (at < end && at + bytes > start).then_some((s.pc, at, bytes))
            });
            if let Some((pc, at, bytes)) = last
                && at + bytes > end
            {
                let helper = info.name;
                return Err(format!(
                    "map `{}` is declared with {size}-byte {what}, but instruction {pc} writes \
                     {bytes} bytes at {at} into the {what_one} that instruction {call} passes \
                     to {helper}, {} past its end: declare the map with the {what} the program \
                     uses",
                    def.name,
                    at + bytes - end,
                    what_one = &what[..what.len() - 1],
                    call = d.pc,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use egpu::ebpf::{DeviceEvent, MapKind};

    fn verified(text: &str, key: u32, value: u32) -> Verified {
        let def = MapDef {
            name: "m".into(),
            kind: MapKind::Hash,
            key_size: key,
            value_size: value,
            capacity: 16,
        };
        let attach = AttachPoint::Device(DeviceEvent::GlobalLoad);
        let program =
            Program::new(assemble(text).expect("assembles"), vec![def], attach).expect("a program");
        verify(&program).expect("verifies")
    }

    const LOOKUP: &str = "mov %r6, 7\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                          add %r2, -8\ncall 1\nmov %r0, 0\nexit";

    #[test]
    fn a_key_written_wider_than_declared_is_refused() {
        assert_eq!(check_widths(&verified(LOOKUP, 8, 8)), Ok(()));
        let err = check_widths(&verified(LOOKUP, 4, 8)).expect_err("an 8-byte key in 4 bytes");
        assert!(err.contains("map `m` is declared with 4-byte keys"), "{err}");
        assert!(err.contains("writes 8 bytes at -8"), "{err}");
        // A 4-byte key written as 4 bytes, with other data beside it, is fine.
        let narrow = "mov %r6, 7\nstxw [%r10-8], %r6\nstxw [%r10-4], %r6\nlddw %r1, map[0]\n\
                      mov %r2, %r10\nadd %r2, -8\ncall 1\nmov %r0, 0\nexit";
        assert_eq!(check_widths(&verified(narrow, 4, 8)), Ok(()));
    }

    #[test]
    fn a_value_written_wider_than_declared_is_refused() {
        let update = "mov %r6, 7\nstxdw [%r10-8], %r6\nstxdw [%r10-16], %r6\nlddw %r1, map[0]\n\
                      mov %r2, %r10\nadd %r2, -8\nmov %r3, %r10\nadd %r3, -16\nmov %r4, 0\n\
                      call 2\nmov %r0, 0\nexit";
        assert_eq!(check_widths(&verified(update, 8, 8)), Ok(()));
        let err = check_widths(&verified(update, 8, 4)).expect_err("an 8-byte value in 4");
        assert!(err.contains("4-byte values") && err.contains("map_update_elem"), "{err}");
    }

    #[test]
    fn names_are_files_or_pack_probes() {
        let n = ProgramName::parse("/no/such/libprobes.so:threads");
        assert_eq!(
            (n.path.to_str(), n.probe.as_deref()),
            (Some("/no/such/libprobes.so"), Some("threads"))
        );
        assert_eq!(n.to_string(), "/no/such/libprobes.so:threads");
        let n = ProgramName::parse("probe.s");
        assert_eq!((n.path.to_str(), n.probe), (Some("probe.s"), None));
        // A folder with a colon in it: the part after it has a slash, so it is the whole path.
        assert_eq!(ProgramName::parse("/a:b/c.s").probe, None);
    }
}
