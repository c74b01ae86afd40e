//! eBPF ELF objects as clang (`clang -O2 -target bpf -c`) and libbpf-style projects make them,
//! read into a [`Pack`]: a probe per program.
//!
//! - **Programs**: each function of a section named `egpu/ATTACH`, where ATTACH is an attach
//!   point with `/` for `::` (`SEC("egpu/device/global_load")`,
//!   `SEC("egpu/host/launch/enter")`, `SEC("egpu/host/memcpy")` for a call's entry), is a
//!   probe named after the function. Functions of `.text` are the programs' subprograms
//!   (bpf-to-bpf calls): each program that calls one gets `.text` after its own code.
//! - **Maps**: BTF-defined ones in `.maps` (`__uint(type, …)`, `__uint(max_entries, …)`,
//!   `__type(key, …)` or `__uint(key_size, …)`, the same for values) and legacy ones in `maps`
//!   (`struct bpf_map_def`: type, key size, value size, max entries, flags, as 32-bit words).
//!   egpu's rings hold fixed-size records: a ring buffer declares its record's type or size as
//!   its value (`__type(value, struct event)`) and its capacity in records as `max_entries`.
//!   A program's map table holds the maps it refers to, in the order it first does.
//! - **Global data**: each section `.rodata*`, `.data*` and `.bss*` is an array of one entry
//!   named after the section, whose value is the section (as libbpf makes them): its first
//!   contents are the section's bytes ([`PackedProbe::data`](crate::pack::PackedProbe::data);
//!   zeros for `.bss`), which whoever creates the maps writes. A program reads and writes its
//!   variables in place, through `lddw rX, map[N]+OFF` (`BPF_PSEUDO_MAP_IDX_VALUE`), as Linux
//!   does; nothing keeps a program from writing `.rodata`, whose changes only it sees.
//! - **Relocations**: `lddw` of a map symbol (`R_BPF_64_64`) becomes a reference to the map's
//!   entry in the program's table, `lddw` of a variable (or of a data section and an offset) a
//!   reference to its place in the value of its section's map, `lddw` of a `.text` function
//!   (`bpf_loop`'s callback) a reference to the function; calls of `.text` functions
//!   (`R_BPF_64_32`) are pointed at the copy of `.text` after the program.
//!
//! Nothing here trusts the object: a malformed one gets a typed error naming the section or
//! symbol, never a panic.

mod btf;
#[cfg(test)]
mod tests;

use egpu_ebpf::insn::opcode as op;
use egpu_ebpf::{AttachPoint, Insn, MapDef, MapKind, Program};
use egpu_maps::layout::Geometry;
use object::elf::{EM_BPF, SHF_EXECINSTR, STT_FUNC};
use object::read::elf::{ElfFile64, FileHeader};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget,
    SectionIndex,
};

use crate::pack::{Pack, PackError};

/// The prefix of the sections whose functions are egpu programs.
pub const SECTION_PREFIX: &str = "egpu/";

/// `R_BPF_64_64`: the 64-bit immediate of an `lddw`.
const R_BPF_64_64: u32 = 1;
/// `R_BPF_64_32`: the 32-bit immediate of a call.
const R_BPF_64_32: u32 = 10;
/// The source field of a call of a local function (`BPF_PSEUDO_CALL`).
const PSEUDO_CALL: u8 = 1;
/// The source field of an `lddw` of a function's address (`BPF_PSEUDO_FUNC`).
const PSEUDO_FUNC_REF: u8 = 4;

/// Why an ELF object could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// Not an ELF file the reader takes.
    #[error("not an ELF object: {0}")]
    Malformed(String),
    /// An ELF file for another machine than eBPF.
    #[error("an ELF object for machine {0}, not eBPF (clang -target bpf makes those)")]
    NotBpf(u16),
    /// No section names an egpu attach point.
    #[error("no program: no section is named `egpu/ATTACH` (`SEC(\"egpu/device/global_load\")`)")]
    NoPrograms,
    /// A section's name is not an attach point.
    #[error("section {section}: `{attach}` is not an attach point (`egpu list` lists them)")]
    Attach {
        /// The section.
        section: String,
        /// What it names.
        attach: String,
    },
    /// The BTF of `.maps` could not be read.
    #[error("BTF: {0}")]
    Btf(String),
    /// A map is declared in a way egpu cannot take.
    #[error("map {map}: {why}")]
    Map {
        /// The map.
        map: String,
        /// Why.
        why: String,
    },
    /// A relocation egpu cannot apply.
    #[error("section {section}, offset {offset}: {why}")]
    Relocation {
        /// The section relocated.
        section: String,
        /// The offset in it.
        offset: u64,
        /// Why.
        why: String,
    },
    /// A program is not a well-formed eBPF program, or egpu could not pack it.
    #[error(transparent)]
    Pack(#[from] PackError),
}

/// Whether `bytes` is an eBPF ELF object (rather than, say, a shared library of probes).
pub fn is_bpf_object(bytes: &[u8]) -> bool {
    is_object(bytes) && u16::from_le_bytes([bytes[18], bytes[19]]) == EM_BPF
}

/// Whether `bytes` is a relocatable ELF object (`ET_REL`), of any machine: what [`load`] reads,
/// or refuses by its machine.
pub fn is_object(bytes: &[u8]) -> bool {
    bytes.len() >= 20
        && bytes[..4] == *b"\x7fELF"
        && u16::from_le_bytes([bytes[16], bytes[17]]) == 1
}

/// A map of the object: its definition and its symbol's section and offset; for global data,
/// the section's bytes.
struct ObjectMap {
    def: MapDef,
    section: SectionIndex,
    offset: u64,
    /// Global data: the section's bytes (trailing zeros left out), which `lddw` reaches
    /// anywhere in.
    data: Option<Vec<u8>>,
}

/// A function's code and where it came from.
struct Code {
    section: SectionIndex,
    section_name: String,
    /// Its first byte in the section.
    start: u64,
    insns: Vec<Insn>,
}

/// Reads an eBPF ELF object into a pack: a probe per program, each verified.
pub fn load(bytes: &[u8]) -> Result<Pack, ElfError> {
    let file =
        ElfFile64::<Endianness>::parse(bytes).map_err(|e| ElfError::Malformed(e.to_string()))?;
    let machine = file.elf_header().e_machine(file.endian());
    if machine != EM_BPF {
        return Err(ElfError::NotBpf(machine));
    }
    let maps = object_maps(&file)?;
    let text = file.section_by_name(".text").map(|s| code(&s, 0, s.size())).transpose()?;
    let mut pack = Pack::new();
    let mut found = 0;
    for section in file.sections() {
        let name = section.name().map_err(|e| ElfError::Malformed(e.to_string()))?;
        let Some(attach) = name.strip_prefix(SECTION_PREFIX) else { continue };
        let attach_point: AttachPoint = attach.replace('/', "::").parse().map_err(|_| {
            ElfError::Attach { section: name.to_owned(), attach: attach.to_owned() }
        })?;
        let mut functions: Vec<(String, u64, u64)> = file
            .symbols()
            .filter(|s| s.section_index() == Some(section.index()) && is_function(s))
            .map(|s| (s.name().unwrap_or("").to_owned(), s.address(), s.size()))
            .collect();
        if functions.is_empty() {
            functions.push((name.replace('/', "_"), 0, section.size()));
        }
        for (function, start, size) in functions {
            let own = code(&section, start, size)?;
            let (insns, table) = link(&file, &maps, own, text.as_ref())?;
            let defs = table.iter().map(|&i| maps[i].def.clone()).collect();
            let program = Program::new(insns, defs, attach_point)
                .map_err(|error| PackError::Program { probe: function.clone(), error })?;
            let verified = egpu_ebpf::verifier::verify(&program)
                .map_err(|error| PackError::Verify { probe: function.clone(), error })?;
            let geometries = program.maps().iter().map(geometry).collect::<Result<_, _>>()?;
            pack.push(&function, verified, geometries)?;
            for m in table.iter().map(|&i| &maps[i]) {
                if let Some(data) = m.data.clone().filter(|d| !d.is_empty()) {
                    pack.with_data(&m.def.name, data)?;
                }
            }
            found += 1;
        }
    }
    if found == 0 {
        return Err(ElfError::NoPrograms);
    }
    Ok(pack)
}

fn is_function(s: &object::read::elf::ElfSymbol64<'_, '_, Endianness>) -> bool {
    s.elf_symbol().st_type() == STT_FUNC && s.size() > 0
}

/// The instructions of `size` bytes at `start` of `section`.
fn code(
    section: &object::read::elf::ElfSection64<'_, '_, Endianness>,
    start: u64,
    size: u64,
) -> Result<Code, ElfError> {
    let name = section.name().unwrap_or("?").to_owned();
    let malformed = |why: &str| ElfError::Malformed(format!("section {name}: {why}"));
    if section.elf_section_header().sh_flags.get(Endianness::Little) & u64::from(SHF_EXECINSTR) == 0
        && name != ".text"
    {
        return Err(malformed("not code"));
    }
    let data = section.data().map_err(|e| malformed(&e.to_string()))?;
    let end = start.checked_add(size).filter(|&e| e <= data.len() as u64);
    let bytes = end
        .map(|end| &data[start as usize..end as usize])
        .ok_or_else(|| malformed("a function lies past its end"))?;
    let insns = egpu_ebpf::insn::slots_from_bytes(bytes).map_err(|e| malformed(&e.to_string()))?;
    Ok(Code { section: section.index(), section_name: name, start, insns })
}

/// The object's maps: legacy ones in `maps`, BTF-defined ones in `.maps`.
fn object_maps(file: &ElfFile64<'_, Endianness>) -> Result<Vec<ObjectMap>, ElfError> {
    let mut out = Vec::new();
    if let Some(section) = file.section_by_name("maps") {
        let data = section.data().map_err(|e| ElfError::Malformed(e.to_string()))?;
        for s in file.symbols().filter(|s| s.section_index() == Some(section.index())) {
            let name = s.name().unwrap_or("").to_owned();
            let at = s.address() as usize;
            let words: Option<Vec<u32>> = (0..4)
                .map(|i| {
                    let b = data.get(at + 4 * i..at + 4 * i + 4)?;
                    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                })
                .collect();
            let Some(w) = words else {
                return Err(ElfError::Map {
                    map: name,
                    why: "its definition lies past `maps`".into(),
                });
            };
            let def = map_def(&name, Some(w[0]), Some(w[1]), Some(w[2]), Some(w[3]))?;
            out.push(ObjectMap { def, section: section.index(), offset: s.address(), data: None });
        }
    }
    if let Some(section) = file.section_by_name(".maps") {
        let btf = file
            .section_by_name(".BTF")
            .ok_or_else(|| ElfError::Btf("`.maps` without `.BTF`: build with `-g`".into()))?;
        let btf = btf::Btf::parse(btf.data().map_err(|e| ElfError::Malformed(e.to_string()))?)?;
        for m in btf.maps()? {
            let symbol = file
                .symbols()
                .find(|s| {
                    s.section_index() == Some(section.index()) && s.name() == Ok(m.name.as_str())
                })
                .ok_or_else(|| ElfError::Map {
                    map: m.name.clone(),
                    why: "no symbol in `.maps`".into(),
                })?;
            let def = map_def(&m.name, m.kind, m.key_size, m.value_size, m.max_entries)?;
            let (section, offset) = (section.index(), symbol.address());
            out.push(ObjectMap { def, section, offset, data: None });
        }
    }
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if !GLOBAL_DATA.iter().any(|d| name == *d || name.starts_with(&format!("{d}."))) {
            continue;
        }
        let why = |why: String| ElfError::Map { map: name.to_owned(), why };
        let size = u32::try_from(section.size())
            .map_err(|_| why(format!("{} bytes of global data", section.size())))?;
        if size == 0 {
            continue;
        }
        // `.bss` has no bytes in the file: zeros.
        let mut data = match name.starts_with(".bss") {
            true => Vec::new(),
            false => section.data().map_err(|e| why(e.to_string()))?.to_vec(),
        };
        while data.last() == Some(&0) {
            data.pop();
        }
        let def = MapDef {
            name: name.to_owned(),
            kind: MapKind::Array,
            key_size: 4,
            value_size: size,
            capacity: 1,
        };
        out.push(ObjectMap { def, section: section.index(), offset: 0, data: Some(data) });
    }
    Ok(out)
}

/// The sections of global data, each an array of one entry (and those named `NAME.SUFFIX`).
const GLOBAL_DATA: [&str; 3] = [".rodata", ".data", ".bss"];

/// A map's definition from its numbers, checked.
fn map_def(
    name: &str,
    kind: Option<u32>,
    key: Option<u32>,
    value: Option<u32>,
    entries: Option<u32>,
) -> Result<MapDef, ElfError> {
    let why = |why: String| ElfError::Map { map: name.to_owned(), why };
    let kind = kind.ok_or_else(|| why("no `type`".into()))?;
    let kind = MapKind::from_linux(kind).ok_or_else(|| {
        why(format!("type {kind} is not one egpu has (hash 1, array 2, percpu_hash 5, percpu_array 6, ringbuf 27)"))
    })?;
    let (key_size, value_size) = match kind {
        // A ring's records: its value, fixed size; no key.
        MapKind::RingBuf => (
            0,
            value.ok_or_else(|| {
                why("a ring buffer's records need a size: `__type(value, struct record)`".into())
            })?,
        ),
        _ => (
            key.ok_or_else(|| why("no key size".into()))?,
            value.ok_or_else(|| why("no value size".into()))?,
        ),
    };
    let capacity = entries.ok_or_else(|| why("no `max_entries`".into()))?;
    Ok(MapDef { name: name.to_owned(), kind, key_size, value_size, capacity })
}

/// A map's layout in a pack: per-CPU kinds with a host shard and a shard per SM of an H200's
/// (as `egpu --map` makes them), the others one host shard.
fn geometry(def: &MapDef) -> Result<Geometry, ElfError> {
    let per_cpu = matches!(def.kind, MapKind::PerCpuHash | MapKind::PerCpuArray);
    let sm_shards = if per_cpu { 132 } else { 0 };
    Geometry::new(def.kind, def.key_size, def.value_size, def.capacity, 1, sm_shards)
        .map_err(|e| ElfError::Map { map: def.name.clone(), why: e.to_string() })
}

/// A program's instructions and map table (indices in `maps`): its own code, relocated, then
/// `.text`'s when it calls into it.
fn link(
    file: &ElfFile64<'_, Endianness>,
    maps: &[ObjectMap],
    own: Code,
    text: Option<&Code>,
) -> Result<(Vec<Insn>, Vec<usize>), ElfError> {
    let mut table: Vec<usize> = Vec::new();
    let mut insns = own.insns.clone();
    let calls_text =
        relocations(file, &own)?.iter().any(|r| r.target_section == text.map(|t| t.section));
    let text_base = insns.len();
    if let (true, Some(text)) = (calls_text, text) {
        insns.extend_from_slice(&text.insns);
    }
    let mut pieces = vec![(&own, 0usize)];
    if let (true, Some(text)) = (calls_text, text) {
        pieces.push((text, text_base));
    }
    for (piece, base) in pieces {
        for r in relocations(file, piece)? {
            let at = base + r.slot;
            let fail = |why: String| ElfError::Relocation {
                section: piece.section_name.clone(),
                offset: r.offset,
                why,
            };
            let insn = insns.get(at).copied().ok_or_else(|| fail("past the code".into()))?;
            match r.kind {
                R_BPF_64_64 if insn.opcode == op::LDDW => {
                    // The symbol's offset, plus the instruction's immediate: 0 for a map's own
                    // symbol, the map's offset when the relocation names its section.
                    let offset = r.symbol_offset.wrapping_add(u64::from(insn.imm as u32));
                    let in_text = text.filter(|t| Some(t.section) == r.target_section);
                    if let Some(text) = in_text {
                        // A function's address (`bpf_loop`'s callback): `lddw func`, pointed at
                        // the copy of `.text` after the program.
                        let target = (offset / 8) as usize;
                        if target >= text.insns.len() {
                            return Err(fail("a function past .text".into()));
                        }
                        insns[at].src = PSEUDO_FUNC_REF;
                        insns[at].imm =
                            ((text_base + target) as i32).wrapping_sub(at as i32).wrapping_sub(1);
                        if let Some(next) = insns.get_mut(at + 1) {
                            next.imm = 0;
                        }
                        continue;
                    }
                    let found = maps.iter().position(|m| {
                        Some(m.section) == r.target_section
                            && (m.offset == offset || m.data.is_some())
                    });
                    if let Some(i) = found {
                        let index = table.iter().position(|&t| t == i).unwrap_or_else(|| {
                            table.push(i);
                            table.len() - 1
                        });
                        insns[at].imm = index as i32;
                        // A variable: its place in the value of its section's map.
                        let (src, next_imm) = match &maps[i].data {
                            None => (op::PSEUDO_MAP_IDX, 0),
                            Some(_) if offset < u64::from(maps[i].def.value_size) => {
                                (op::PSEUDO_MAP_IDX_VALUE, offset as i32)
                            }
                            Some(_) => {
                                return Err(fail(format!(
                                    "`lddw` of byte {offset} of {}, past its end",
                                    r.in_section
                                )));
                            }
                        };
                        insns[at].src = src;
                        if let Some(next) = insns.get_mut(at + 1) {
                            next.imm = next_imm;
                        }
                    } else {
                        return Err(fail(format!("`lddw` of {}, which is no map", r.target_name)));
                    }
                }
                R_BPF_64_32 if insn.opcode == (op::JMP | op::CALL) && insn.src == PSEUDO_CALL => {
                    let Some(text) = text.filter(|t| Some(t.section) == r.target_section) else {
                        return Err(fail(format!("a call into {}, not .text", r.target_name)));
                    };
                    // A function symbol names its first instruction; a section symbol's call
                    // holds the target's slot less one in its immediate.
                    let target = match r.function {
                        true => r.symbol_offset / 8,
                        false => (i64::from(insn.imm) + 1).max(0) as u64,
                    } as usize;
                    if target >= text.insns.len() {
                        return Err(fail("a call past .text".into()));
                    }
                    insns[at].imm =
                        ((text_base + target) as i32).wrapping_sub(at as i32).wrapping_sub(1);
                }
                other => {
                    return Err(fail(format!(
                        "relocation type {other} on opcode {:#04x}",
                        insn.opcode
                    )));
                }
            }
        }
    }
    Ok((insns, table))
}

/// A relocation of a piece of code: its slot in the piece, what it points at.
struct Reloc {
    offset: u64,
    slot: usize,
    kind: u32,
    target_section: Option<SectionIndex>,
    /// The symbol's name, or its section's when it has none.
    target_name: String,
    /// The name of the section the symbol is in.
    in_section: String,
    symbol_offset: u64,
    function: bool,
}

/// The relocations that fall in `code`.
fn relocations(file: &ElfFile64<'_, Endianness>, code: &Code) -> Result<Vec<Reloc>, ElfError> {
    let section =
        file.section_by_index(code.section).map_err(|e| ElfError::Malformed(e.to_string()))?;
    let end = code.start + 8 * code.insns.len() as u64;
    let mut out = Vec::new();
    for (offset, r) in section.relocations() {
        if offset < code.start || offset >= end {
            continue;
        }
        let fail = |why: &str| ElfError::Relocation {
            section: code.section_name.clone(),
            offset,
            why: why.to_owned(),
        };
        let RelocationFlags::Elf { r_type } = r.flags() else {
            return Err(fail("not an ELF relocation"));
        };
        let RelocationTarget::Symbol(index) = r.target() else { return Err(fail("no symbol")) };
        let symbol = file.symbol_by_index(index).map_err(|_| fail("a symbol past the table"))?;
        let target_section = symbol.section_index();
        let in_section = target_section
            .and_then(|i| file.section_by_index(i).ok())
            .and_then(|s| s.name().ok().map(str::to_owned))
            .unwrap_or_default();
        let target_name = match symbol.name() {
            Ok("") | Err(_) => in_section.clone(),
            Ok(name) => name.to_owned(),
        };
        if !(offset - code.start).is_multiple_of(8) {
            return Err(fail("not at an instruction"));
        }
        out.push(Reloc {
            offset,
            slot: ((offset - code.start) / 8) as usize,
            kind: r_type,
            target_section,
            target_name,
            in_section,
            symbol_offset: symbol.address(),
            function: is_function(&symbol),
        });
    }
    Ok(out)
}
