//! Programs: loaded from bytecode or assembly (with an attach point and a map table), or taken
//! from an object (an eBPF ELF object, a probe pack's text, or a file of either, or a shared
//! library of probes); verified once; described.

use std::ffi::{CString, c_char};
use std::sync::{Arc, Mutex};

use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, MapDef, MapKind, Program, assemble};
use egpu_host::pack::{Pack, PackError};
use egpu_maps::layout::Geometry;

use crate::error::{
    EGPU_BAD_ARGUMENT, EGPU_BAD_PROGRAM, EGPU_IO, EGPU_NOT_FOUND, EGPU_VERIFY, Failure, Result,
    egpu_status, fail, guard,
};
use crate::ffi::{self, Kind};

/// A program: its instructions, map table and attach point, and once verified, what the
/// verifier found. Made by `egpu_program_from_bytecode`, `egpu_program_from_assembly` or
/// `egpu_object_program`; freed by `egpu_program_free`. Immutable apart from its verification,
/// which happens once under a lock: usable from any thread, by several at once.
#[derive(Debug)]
pub struct egpu_program {
    _opaque: [u8; 0],
}

/// Probes read from an ELF object, a pack or a file: each a verified program. Made by
/// `egpu_object_from_elf`, `egpu_object_from_pack` or `egpu_object_from_file`; freed by
/// `egpu_object_free`. Immutable: usable from any thread.
#[derive(Debug)]
pub struct egpu_object {
    _opaque: [u8; 0],
}

pub(crate) struct ProgramHandle {
    name: CString,
    attach: CString,
    program: Program,
    /// The map layouts a pack gave (shards included); `None` for bytecode and assembly.
    layouts: Option<Vec<Geometry>>,
    map_names: Vec<CString>,
    /// Each map's first contents (an object's global data), empty for a map that starts empty.
    data: Vec<Vec<u8>>,
    verified: Mutex<Option<Arc<Verified>>>,
}

impl Kind for ProgramHandle {
    type Opaque = egpu_program;
    const NAME: &'static str = "egpu_program";
    const MAGIC: u64 = ffi::KINDS[0].0;
}

pub(crate) struct ObjectHandle {
    pack: Pack,
}

impl Kind for ObjectHandle {
    type Opaque = egpu_object;
    const NAME: &'static str = "egpu_object";
    const MAGIC: u64 = ffi::KINDS[1].0;
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

impl ProgramHandle {
    fn new(
        name: &str,
        program: Program,
        layouts: Option<Vec<Geometry>>,
        data: Vec<Vec<u8>>,
        verified: Option<Verified>,
    ) -> ProgramHandle {
        ProgramHandle {
            data,
            name: c_string(name),
            attach: c_string(&program.attach_point().to_string()),
            map_names: program.maps().iter().map(|m| c_string(&m.name)).collect(),
            program,
            layouts,
            verified: Mutex::new(verified.map(Arc::new)),
        }
    }

    /// The program, verified: by the verifier now if it was not before (once: the result is
    /// kept).
    pub(crate) fn verified(&self) -> Result<Arc<Verified>> {
        let mut kept = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = kept.as_ref() {
            return Ok(v.clone());
        }
        let name = self.name.to_string_lossy();
        let v = Arc::new(verify(&self.program).map_err(|e| {
            Failure::new(EGPU_VERIFY, format!("{name}: the verifier refused it: {e}"))
        })?);
        *kept = Some(v.clone());
        Ok(v)
    }

    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    pub(crate) fn name(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }

    /// Writes map `index`'s first contents (an ELF object's `.rodata` or `.data`: the value of
    /// an array of one entry) into `map`, just made for it; nothing for a map that starts empty.
    pub(crate) fn fill(&self, index: usize, map: &egpu_maps::RawMap) -> Result<()> {
        let Some(data) = self.data.get(index).filter(|d| !d.is_empty()) else { return Ok(()) };
        let mut value = data.clone();
        value.resize(map.geometry().value_size as usize, 0);
        map.update(&0u32.to_le_bytes(), &value, egpu_maps::UpdateFlags::Any)
            .map_err(crate::maps::map_failure)
    }

    /// The layout of map `index` of the table: the pack's, or the one the CPU VM gives a map
    /// it makes (one shard per CPU for per-CPU kinds, one otherwise).
    pub(crate) fn layout(&self, index: usize) -> Result<Geometry> {
        let Some(def) = self.program.maps().get(index) else {
            return fail(
                EGPU_NOT_FOUND,
                format!(
                    "the program's map table has {} maps, no {index}",
                    self.program.maps().len()
                ),
            );
        };
        if let Some(g) = self.layouts.as_ref().and_then(|l| l.get(index)) {
            return Ok(*g);
        }
        let cpu = match def.kind {
            MapKind::PerCpuArray | MapKind::PerCpuHash => egpu_maps::cpu_count(),
            _ => 1,
        };
        Geometry::new(def.kind, def.key_size, def.value_size, def.capacity, cpu, 0)
            .map_err(|e| Failure::new(crate::error::EGPU_MAP, format!("map {}: {e}", def.name)))
    }
}

/// What a program made from bytecode or assembly is: its name, attach point and map table.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_program_desc {
    /// `sizeof(egpu_program_desc)`.
    pub size: usize,
    /// The program's name, for messages (null: `"program"`).
    pub name: *const c_char,
    /// Where it attaches, as `egpu list` spells it: `"host::launch"` (a call's entry),
    /// `"host::memcpy::exit"`, `"device::global_load"`, `"user(16)"` (a caller's own context of
    /// 16 bytes, for `egpu_vm_run`). Not null.
    pub attach: *const c_char,
    /// Its map table, in order: declarations `NAME=KIND:KEY:VALUE:CAPACITY` (KIND one of
    /// `hash`, `array`, `percpu_hash`, `percpu_array`, `ringbuf`) separated by spaces, commas,
    /// semicolons or newlines; `lddw rX, map[n]` names the n-th. Null or empty: no maps.
    pub maps: *const c_char,
}

// SAFETY: `#[repr(C)]`, starts with its size; pointers are checked where read.
unsafe impl ffi::SizedStruct for egpu_program_desc {
    const NAME: &'static str = "egpu_program_desc";
}

/// Reads a descriptor's name, attach point and map table.
///
/// # Safety
/// `desc` is null or a valid `egpu_program_desc` whose strings are null or NUL-terminated.
unsafe fn described(desc: *const egpu_program_desc) -> Result<(String, AttachPoint, Vec<MapDef>)> {
    // SAFETY: forwarded.
    let d = unsafe { ffi::read(desc, "desc") }?;
    // SAFETY: the strings of a valid descriptor.
    let (name, attach, maps) = unsafe {
        (
            ffi::optional_text(d.name, "desc->name")?.unwrap_or("program"),
            ffi::text(d.attach, "desc->attach")?,
            ffi::optional_text(d.maps, "desc->maps")?.unwrap_or(""),
        )
    };
    let attach: AttachPoint = attach
        .parse()
        .map_err(|e| Failure::new(EGPU_BAD_ARGUMENT, format!("desc->attach: {e}")))?;
    let maps = parse_maps(maps)?;
    Ok((name.to_owned(), attach, maps))
}

/// A map table's declarations, separated by whitespace, commas or semicolons.
pub(crate) fn parse_maps(text: &str) -> Result<Vec<MapDef>> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.parse::<MapDef>()
                .map_err(|e| Failure::new(EGPU_BAD_ARGUMENT, format!("map declaration `{d}`: {e}")))
        })
        .collect()
}

/// Makes a program from eBPF bytecode: `length` bytes at `code`, little-endian 8-byte
/// instructions (as clang's `.o` sections and `Program::to_bytes` hold them), with the name,
/// attach point and map table `desc` gives. The program is checked for its structure (every
/// slot decodes, jumps land on instructions, map references name table entries:
/// `EGPU_BAD_PROGRAM`), not verified: `egpu_program_verify` does that, or the first call that
/// needs it. The new program through `out`.
///
/// # Safety
/// `desc` is null or a valid descriptor; `code` is null or valid for `length` bytes; `out` is
/// null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_from_bytecode(
    desc: *const egpu_program_desc,
    code: *const u8,
    length: usize,
    out: *mut *mut egpu_program,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises, forwarded.
        let (name, attach, maps) = unsafe { described(desc) }?;
        // SAFETY: as above.
        let code = unsafe { ffi::bytes(code, length, "code") }?;
        if out.is_null() {
            return fail(crate::error::EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let program = Program::from_bytes(code, maps, attach)
            .map_err(|e| Failure::new(EGPU_BAD_PROGRAM, format!("{name}: {e}")))?;
        let handle = ffi::new_handle(ProgramHandle::new(&name, program, None, Vec::new(), None));
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(out, handle, "out") }
    })
}

/// Makes a program from eBPF assembly text (bpf_conformance's syntax, as `egpu` disassembles:
/// `mov %r0, 1` / `exit`), as `egpu_program_from_bytecode` does from bytes; a line that does not
/// assemble is `EGPU_BAD_PROGRAM`, with the line.
///
/// # Safety
/// As for `egpu_program_from_bytecode`; `text` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_from_assembly(
    desc: *const egpu_program_desc,
    text: *const c_char,
    out: *mut *mut egpu_program,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises, forwarded.
        let (name, attach, maps) = unsafe { described(desc) }?;
        // SAFETY: as above.
        let text = unsafe { ffi::text(text, "text") }?;
        if out.is_null() {
            return fail(crate::error::EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let slots =
            assemble(text).map_err(|e| Failure::new(EGPU_BAD_PROGRAM, format!("{name}: {e}")))?;
        let program = Program::new(slots, maps, attach)
            .map_err(|e| Failure::new(EGPU_BAD_PROGRAM, format!("{name}: {e}")))?;
        let handle = ffi::new_handle(ProgramHandle::new(&name, program, None, Vec::new(), None));
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(out, handle, "out") }
    })
}

/// Verifies the program, once: later calls (and `egpu_vm_new`, `egpu_probes_attach`, which
/// verify a program not verified yet) take the kept result. `EGPU_VERIFY` when the verifier
/// refuses it, with a message that names the instruction (`instruction 3 \`ldxdw %r0, [%r1+0]\`:
/// …`) and the registers it reads.
///
/// # Safety
/// `program` is null or a live program handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_verify(program: *const egpu_program) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { ffi::handle::<ProgramHandle>(program, "program") }?;
        p.verified().map(drop)
    })
}

/// What `egpu_program_get_info` tells of a program. Its strings belong to the program and live as
/// long as it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_program_info {
    /// `sizeof(egpu_program_info)`, set by the caller.
    pub size: usize,
    /// The program's name.
    pub name: *const c_char,
    /// Its attach point, as `host::launch::enter`, `device::global_load`, `user(16 bytes)`.
    pub attach: *const c_char,
    /// The size of the context it takes: `egpu_vm_run`'s and `egpu_probes_fire`'s `ctx_length`.
    pub context_size: usize,
    /// Its 8-byte instruction slots.
    pub instructions: usize,
    /// Entries of its map table.
    pub maps: usize,
    /// 1 when it attaches to a host event (`egpu_probes_attach`), else 0.
    pub host: u32,
    /// 1 when it attaches to a device event (`egpu_ptx_instrument`), else 0.
    pub device: u32,
    /// 1 when it has been verified, else 0.
    pub verified: u32,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_program_info {
    const NAME: &'static str = "egpu_program_info";
}

/// Describes the program into `info`, whose `size` the caller sets.
///
/// # Safety
/// `program` is null or a live program handle; `info` is null or valid for `info->size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_get_info(
    program: *const egpu_program,
    info: *mut egpu_program_info,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { ffi::handle::<ProgramHandle>(program, "program") }?;
        let attach = p.program.attach_point();
        let verified = p.verified.lock().map(|v| v.is_some()).unwrap_or(false);
        let value = egpu_program_info {
            size: 0,
            name: p.name.as_ptr(),
            attach: p.attach.as_ptr(),
            context_size: attach.context_size(),
            instructions: p.program.insns().len(),
            maps: p.program.maps().len(),
            host: u32::from(matches!(attach, AttachPoint::Host(..))),
            device: u32::from(attach.is_device()),
            verified: u32::from(verified),
        };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(info, value, "info") }
    })
}

/// One entry of a program's map table, as `egpu_program_map` describes it: what a map bound
/// to it must be (`egpu_map_create` takes the same fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_map_def {
    /// `sizeof(egpu_map_def)`, set by the caller.
    pub size: usize,
    /// The map's name (belongs to the program).
    pub name: *const c_char,
    /// Its kind: an `egpu_map_kind`.
    pub kind: u32,
    /// Key size in bytes (4 for arrays, 0 for ring buffers).
    pub key_size: u32,
    /// Value size in bytes (a ring buffer's record size).
    pub value_size: u32,
    /// Entries (per shard), or a ring's records.
    pub capacity: u32,
    /// Host shards of the layout a pack gave, or that a map made for it gets.
    pub cpu_shards: u32,
    /// Device (SM) shards, likewise.
    pub sm_shards: u32,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_map_def {
    const NAME: &'static str = "egpu_map_def";
}

/// Describes entry `index` of the program's map table into `def`; `EGPU_NOT_FOUND` past its
/// end.
///
/// # Safety
/// `program` is null or a live program handle; `def` is null or valid for `def->size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_map(
    program: *const egpu_program,
    index: usize,
    def: *mut egpu_map_def,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { ffi::handle::<ProgramHandle>(program, "program") }?;
        let g = p.layout(index)?;
        let value = egpu_map_def {
            size: 0,
            name: p.map_names[index].as_ptr(),
            kind: g.kind as u32,
            key_size: g.key_size,
            value_size: g.value_size,
            capacity: g.capacity,
            cpu_shards: g.cpu_shards,
            sm_shards: g.sm_shards,
        };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(def, value, "def") }
    })
}

/// Writes the program as assembly text, NUL-terminated, into `buffer` (`length` bytes); the
/// length it takes with its NUL through `needed` (when not null), also when the buffer is too
/// small (`EGPU_BUFFER_TOO_SMALL`): call with a null buffer and 0 to ask.
///
/// # Safety
/// `program` is null or a live program handle; `buffer` is null or valid for `length` bytes;
/// `needed` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_disassemble(
    program: *const egpu_program,
    buffer: *mut c_char,
    length: usize,
    needed: *mut usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { ffi::handle::<ProgramHandle>(program, "program") }?;
        // SAFETY: the caller's promises.
        unsafe { ffi::copy_text(&p.program.disassemble(), buffer, length, needed) }
    })
}

/// Frees a program (null: nothing). VMs and attachments made from it keep what they need.
///
/// # Safety
/// `program` is null or a live program handle, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_program_free(program: *mut egpu_program) {
    // SAFETY: the caller's promise.
    guard(|| unsafe { ffi::free_handle::<ProgramHandle>(program, "program") });
}

fn pack_failure(e: PackError) -> Failure {
    match e {
        PackError::Verify { .. } => Failure::new(EGPU_VERIFY, e.to_string()),
        PackError::Load { .. } => Failure::new(EGPU_IO, e.to_string()),
        e => Failure::new(EGPU_BAD_PROGRAM, e.to_string()),
    }
}

fn elf_failure(e: egpu_host::elf::ElfError) -> Failure {
    match e {
        egpu_host::elf::ElfError::Pack(e) => pack_failure(e),
        e => Failure::new(EGPU_BAD_PROGRAM, e.to_string()),
    }
}

/// # Safety
/// `out` is null or writable.
unsafe fn put_object(pack: Pack, out: *mut *mut egpu_object) -> Result<()> {
    let handle = ffi::new_handle(ObjectHandle { pack });
    // SAFETY: the caller's promise; the handle is freed again when `out` is null.
    unsafe { ffi::put(out, handle, "out") }.inspect_err(|_| {
        // SAFETY: just made, never handed out.
        let _ = unsafe { ffi::free_handle::<ObjectHandle>(handle, "object") };
    })
}

/// Reads an eBPF ELF object as clang makes them (`clang -O2 -g -target bpf -c probe.c`, each
/// program in a section `egpu/ATTACH`, maps in `.maps` or `maps`): `length` bytes at `bytes`.
/// Every program is verified here; a refusal is `EGPU_VERIFY` naming the program and the
/// instruction, anything else unreadable `EGPU_BAD_PROGRAM`.
///
/// # Safety
/// `bytes` is null or valid for `length` bytes; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_from_elf(
    bytes: *const u8,
    length: usize,
    out: *mut *mut egpu_object,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let bytes = unsafe { ffi::bytes(bytes, length, "bytes") }?;
        let pack = egpu_host::elf::load(bytes).map_err(elf_failure)?;
        // SAFETY: the caller's promise.
        unsafe { put_object(pack, out) }
    })
}

/// Reads a probe pack's text (`egpu-probes 2` first, as `egpu::export_probes!` and
/// `Pack::to_text` write): `length` bytes at `bytes`, verified as `egpu_object_from_elf`
/// verifies.
///
/// # Safety
/// As for `egpu_object_from_elf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_from_pack(
    bytes: *const u8,
    length: usize,
    out: *mut *mut egpu_object,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let bytes = unsafe { ffi::bytes(bytes, length, "bytes") }?;
        let text = std::str::from_utf8(bytes)
            .map_err(|_| Failure::new(EGPU_BAD_PROGRAM, "a pack is UTF-8 text; this is not"))?;
        let pack = Pack::parse(text).map_err(pack_failure)?;
        // SAFETY: the caller's promise.
        unsafe { put_object(pack, out) }
    })
}

/// Reads the file at `path`: an eBPF ELF object, a pack's text, or a shared library of probes
/// (`egpu::export_probes!`, loaded into this process to read its pack). `EGPU_IO` when it
/// cannot be read or loaded.
///
/// # Safety
/// `path` is null or a NUL-terminated string; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_from_file(
    path: *const c_char,
    out: *mut *mut egpu_object,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let path = unsafe { ffi::text(path, "path") }?;
        let pack = Pack::load(std::path::Path::new(path)).map_err(pack_failure)?;
        // SAFETY: the caller's promise.
        unsafe { put_object(pack, out) }
    })
}

/// The number of programs in the object, through `count`.
///
/// # Safety
/// `object` is null or a live object handle; `count` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_count(
    object: *const egpu_object,
    count: *mut usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let o = unsafe { ffi::handle::<ObjectHandle>(object, "object") }?;
        // SAFETY: the caller's promise.
        unsafe { ffi::put(count, o.pack.probes().len(), "count") }
    })
}

/// A new program handle for program `index` of the object (verified already; its maps'
/// layouts are the object's), to free with `egpu_program_free`. `EGPU_NOT_FOUND` past the end.
///
/// # Safety
/// `object` is null or a live object handle; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_program(
    object: *const egpu_object,
    index: usize,
    out: *mut *mut egpu_program,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let o = unsafe { ffi::handle::<ObjectHandle>(object, "object") }?;
        let probes = o.pack.probes();
        let Some(p) = probes.get(index) else {
            return fail(
                EGPU_NOT_FOUND,
                format!("the object has {} programs, no {index}", probes.len()),
            );
        };
        // SAFETY: the caller's promise.
        unsafe { put_program(p, out) }
    })
}

/// As `egpu_object_program`, for the program named `name` (its function's name in an ELF
/// object, its probe's name in a pack).
///
/// # Safety
/// `object` is null or a live object handle; `name` is null or a NUL-terminated string; `out`
/// is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_find(
    object: *const egpu_object,
    name: *const c_char,
    out: *mut *mut egpu_program,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let o = unsafe { ffi::handle::<ObjectHandle>(object, "object") }?;
        // SAFETY: the caller's promise.
        let name = unsafe { ffi::text(name, "name") }?;
        let Some(p) = o.pack.probes().iter().find(|p| p.name == name) else {
            let names: Vec<&str> = o.pack.probes().iter().map(|p| p.name.as_str()).collect();
            return fail(EGPU_NOT_FOUND, format!("no program `{name}` (the object has {names:?})"));
        };
        // SAFETY: the caller's promise.
        unsafe { put_program(p, out) }
    })
}

/// # Safety
/// `out` is null or writable.
unsafe fn put_program(p: &egpu_host::pack::PackedProbe, out: *mut *mut egpu_program) -> Result<()> {
    if out.is_null() {
        return fail(crate::error::EGPU_NULL_ARGUMENT, "`out` is null");
    }
    let program = p.program.program().clone();
    let handle = ProgramHandle::new(
        &p.name,
        program,
        Some(p.maps.clone()),
        p.data.clone(),
        Some(p.program.clone()),
    );
    // SAFETY: checked not null; the caller's promise that it is writable.
    unsafe { ffi::put(out, ffi::new_handle(handle), "out") }
}

/// Frees an object (null: nothing); programs taken from it stay.
///
/// # Safety
/// `object` is null or a live object handle, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_object_free(object: *mut egpu_object) {
    // SAFETY: the caller's promise.
    guard(|| unsafe { ffi::free_handle::<ObjectHandle>(object, "object") });
}
