//! eBPF → PTX: the translation of verified programs into PTX that runs inside a kernel.
//!
//! The input is a [`Verified`] program, never a raw one: the GPU has no memory protection, so
//! only what the verifier proved safe reaches it, and the translation leans on what the verifier
//! learned. For every load and store it knows the region reached ([`Access`]), so
//!
//! - a load from a device context (kernel entry and exit, global loads and stores) at its constant
//!   offset becomes the special register or site value that holds the field (`%tid.x`,
//!   `%ctaid.y`, `%smid`, the access's address, …): a field the probe does not read costs
//!   nothing;
//! - a stack frame whose address never escapes (every access at a constant offset of its own
//!   frame, or read by an inlined helper) lives in registers, one 64-bit register per 8-byte
//!   slot, read and written with `bfe`/`bfi`; other frames are a `.local` array, addressed
//!   directly at constant offsets;
//! - an atomic on the stack (which only its thread sees) is a plain read-modify-write, and an
//!   atomic on a map value is a PTX `atom`/`red`;
//! - an access the verifier could not prove naturally aligned (user contexts only: device
//!   programs must be aligned) is done byte by byte, since the GPU faults on misaligned accesses.
//!
//! # The shape of the output
//!
//! eBPF registers are 64-bit PTX registers, every one named with the translation's
//! [`prefix`](Options::prefix) so that the code can be spliced into any kernel without touching
//! its registers, predicates or labels. The main function becomes one `{ … }` block
//! ([`Translation::body`]), to be placed where the probe runs; each local function becomes a
//! `.func` with `.reg` parameters ([`Translation::functions`]), to be placed at module level
//! before the function that holds the block. `exit` of the main function leaves the block, with
//! `r0` in [`Options::result`] when one is named.
//!
//! Arithmetic follows RFC 9669 exactly, including the cases where PTX and eBPF differ: division
//! by zero gives 0 and the remainder by zero the dividend, `MIN / -1` is `MIN`, shift counts are
//! masked to the operand width, and 32-bit operations zero-extend their result.
//!
//! Helpers are inlined: `bpf_ktime_get_ns` (`%globaltimer`), `bpf_get_prandom_u32`,
//! `bpf_get_smp_processor_id` (`%smid`), `bpf_get_current_pid_tgid`, and, with the map's
//! geometry as constants, `bpf_map_lookup_elem`, `bpf_map_update_elem`, `bpf_map_delete_elem`
//! on arrays and hash maps (per-CPU ones too) and `bpf_ringbuf_output` (see the `maps` part of
//! this module's source, `translate/maps.rs`). A program calling another helper is refused with
//! [`TranslateError::Helper`] before any kernel runs it.
//!
//! ```
//! use egpu_ptx::translate::{Context, Options, translate};
//! use egpu_ebpf::{AttachPoint, Program, assemble, verifier::verify};
//!
//! let program = Program::new(
//!     assemble("mov %r0, 6\nmul %r0, 7\nexit")?,
//!     vec![],
//!     AttachPoint::User { ctx_size: 0 },
//! )?;
//! let verified = verify(&program)?;
//! let options = Options::new("p0", Context::Memory("%rd1".into()));
//! let ptx = translate(&verified, &options)?;
//! assert!(ptx.body.contains("mul.lo.s64 %p0_r0, %p0_r0, 7;"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod maps;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::offset_of;

use egpu_ebpf::MapKind;
use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::{Access, AccessRegion, Verified};
use egpu_ebpf::{
    AluOp, AtomicOp, AttachPoint, ByteOrder, CallTarget, DeviceEvent, Imm64, Instruction, JmpCond,
    KernelCtx, MemAccessCtx, Operand, Program, Reg, Size, Width,
};
use egpu_maps::layout::Geometry;

/// Why a program cannot be translated. Reported when a probe is attached, before any kernel
/// runs it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranslateError {
    /// The program calls a helper the GPU does not provide (yet).
    #[error("instruction {pc}: helper {id} ({name}) is not available on the GPU")]
    Helper {
        /// The call's slot.
        pc: usize,
        /// The helper number.
        id: u32,
        /// Its name, where the table has it.
        name: &'static str,
    },
    /// The program references a map, and device maps are not bound by this translation.
    #[error("instruction {pc}: map `{name}` has no device binding")]
    Map {
        /// The `lddw`'s slot.
        pc: usize,
        /// The map's name.
        name: String,
    },
    /// A map the GPU cannot use this way (its kind, or a per-CPU map without device shards).
    #[error("instruction {pc}: map `{name}`: {why}")]
    MapUse {
        /// The instruction's slot.
        pc: usize,
        /// The map's name.
        name: String,
        /// Why.
        why: String,
    },
    /// A `callx` whose helper differs between paths.
    #[error("instruction {pc}: `callx` calls different helpers on different paths")]
    VaryingCallx {
        /// The call's slot.
        pc: usize,
    },
    /// The context given does not fit the program's attach point.
    #[error("the program attaches to {attach}, which does not take a {given} context")]
    Context {
        /// The program's attach point.
        attach: AttachPoint,
        /// What was given.
        given: &'static str,
    },
    /// The kernel name is not a PTX identifier (or takes the translation's own names, `e_…`).
    #[error(
        "`{0}` cannot name a kernel: use letters, digits, `_` and `$`, not starting with a digit or `e_`"
    )]
    KernelName(String),
    /// The prefix is not a PTX identifier.
    #[error("`{0}` is not a valid prefix: use letters, digits and `_`, starting with a letter")]
    Prefix(String),
}

/// Where the probe's context comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Context {
    /// The context is memory at a generic address, held by this 64-bit PTX operand (for user
    /// attach points, and for the conformance kernels).
    Memory(String),
    /// Kernel entry or exit ([`KernelCtx`]): every field comes from a special register.
    Kernel {
        /// The kernel's id (64-bit hash of its mangled name).
        kernel_id: u64,
    },
    /// A global load or store ([`MemAccessCtx`]).
    Access {
        /// The kernel's id.
        kernel_id: u64,
        /// The 64-bit PTX register holding the address accessed.
        addr: String,
        /// Bytes accessed.
        size: u32,
        /// The access's index among the kernel's observed accesses.
        site: u32,
        /// A store rather than a load.
        is_store: bool,
    },
}

/// How to translate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Starts every register, label and function name the translation declares; must be unique
    /// in the module the code goes into (for example one per injection site).
    pub prefix: String,
    /// Where the context comes from.
    pub context: Context,
    /// A 64-bit register, declared by the caller, that receives `r0` when the program exits.
    pub result: Option<String>,
    /// The host process id, for `bpf_get_current_pid_tgid`.
    pub pid: u32,
    /// The device side of each map of the program's map table, in its order.
    pub maps: Vec<DeviceMap>,
    /// Two 64-bit registers of the kernel, an address and a sum, through which atomic adds to
    /// map values are combined per thread (see [`combines`]); the kernel starts them at 0 and
    /// flushes the sum (`red.add`) when it exits. `None`: every add is its own atomic.
    pub combine: Option<[String; 2]>,
    /// The SM version the code will run on, from the module's `.target` (`sm_90`: 90). Below
    /// 80, adds are not aggregated across a warp (`redux.sync` needs sm_80).
    pub sm: u32,
    /// A 32-bit register of the kernel that holds `%smid`, read once when the kernel starts (a
    /// thread never moves to another SM); `None`: read `%smid` where needed.
    pub smid: Option<String>,
    /// Per map (in [`maps`](Options::maps) order): two 64-bit registers of the kernel, a key and
    /// a value address, through which a thread remembers its last hit in that hash map (keys of
    /// at most 8 bytes): a lookup of the same key again finds the value without probing. The
    /// kernel starts the address at 0. Only for maps whose entries stay where they are while
    /// the kernel runs: in GPU memory (nobody else writes them) and removed from by no probe of
    /// the kernel (device inserts never reuse a removed entry's slot). `None` or missing: no
    /// cache.
    pub lookup_cache: Vec<Option<[String; 2]>>,
}

/// PTX that adds the `u64` in `val` to the `u64` at `addr`, aggregated
/// across the warp: the lanes that add to the same address (`match.any.sync`) make one atomic,
/// from their lowest lane, with their sum (`redux.sync`), when every value of the group is below
/// 2^26 (so the 32-bit sum is exact); otherwise each lane adds its own. `space` is the address's
/// state space (`.global`, or empty for a generic address: measured, the per-thread flush takes 6
/// more registers with `.global`, the hash map's adds are faster with it). `tmp32` are four
/// 32-bit registers, `pred` a predicate, `tmp64` a 64-bit register, all free; `label` is a unique
/// label stem.
/// When `known` holds the value every lane adds (a constant), the group's sum is its size times
/// that value, with no vote and no `redux.sync`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn warp_add(
    addr: &str,
    val: &str,
    known: Option<i64>,
    space: &str,
    tmp32: [&str; 4],
    pred: &str,
    tmp64: &str,
    label: &str,
) -> String {
    let [w0, w1, w2, w3] = tmp32;
    let group = format!(
        "\tactivemask.b32 {w0};\n\
         \tmatch.any.sync.b64 {w1}, {addr}, {w0};\n"
    );
    let leader = format!(
        "\tmov.u32 {w0}, %lanemask_lt;\n\
         \tand.b32 {w3}, {w0}, {w1};\n\
         \tsetp.ne.u32 {pred}, {w3}, 0;\n\
         \t@{pred} bra {label}_done;\n"
    );
    if let Some(c) = known {
        let times =
            if c == 1 { String::new() } else { format!("\tmul.lo.u64 {tmp64}, {tmp64}, {c};\n") };
        return format!(
            "{group}{leader}\
             \tpopc.b32 {w2}, {w1};\n\
             \tcvt.u64.u32 {tmp64}, {w2};\n\
             {times}\
             \tred{space}.add.u64 [{addr}], {tmp64};\n\
             {label}_done:\n"
        );
    }
    format!(
        "{group}\
         \tsetp.lt.u64 {pred}, {val}, 67108864;\n\
         \tvote.sync.all.pred {pred}, {pred}, {w1};\n\
         \t@!{pred} bra {label}_single;\n\
         \tcvt.u32.u64 {w2}, {val};\n\
         \tredux.sync.add.u32 {w2}, {w2}, {w1};\n\
         {leader}\
         \tcvt.u64.u32 {tmp64}, {w2};\n\
         \tred{space}.add.u64 [{addr}], {tmp64};\n\
         \tbra {label}_done;\n\
         {label}_single:\n\
         \tred{space}.add.u64 [{addr}], {val};\n\
         {label}_done:\n"
    )
}

/// The maps (indices into the program's map table) whose entries the program looks up by
/// `bpf_map_lookup_elem`, and those it removes entries from by `bpf_map_delete_elem` (`None`
/// when a removal's map is not the same on every path).
pub fn lookups_and_removals(verified: &Verified) -> (BTreeSet<u32>, Option<BTreeSet<u32>>) {
    let mut lookups = BTreeSet::new();
    let mut removals = Some(BTreeSet::new());
    for d in verified.program().decoded() {
        let Instruction::Call(CallTarget::Helper(id)) = d.insn else { continue };
        let map = verified.call(d.pc).and_then(|c| c.map);
        match id {
            helper_id::MAP_LOOKUP_ELEM => lookups.extend(map),
            helper_id::MAP_DELETE_ELEM => match (map, removals.as_mut()) {
                (Some(m), Some(r)) => {
                    r.insert(m);
                }
                _ => removals = None,
            },
            _ => {}
        }
    }
    (lookups, removals)
}

/// Whether the program makes 64-bit atomic adds to map values whose old value it does not read,
/// which a kernel can combine per thread ([`Options::combine`]): successive adds to one address
/// become one register add, and the sum reaches memory once, when the address changes or the
/// kernel exits. Device updates are then all visible when the kernel completes, as the map
/// contract requires, but not to the probe itself before that.
pub fn combines(verified: &Verified) -> bool {
    verified.program().decoded().iter().any(|d| {
        matches!(
            d.insn,
            Instruction::Atomic { op: AtomicOp::Add, fetch: false, size: Size::DW, .. }
        ) && combinable(verified.program(), verified.access(d.pc))
    })
}

/// Whether an access reaches a value that a thread's successive adds tend to hit again: an
/// element of an array or per-CPU array (a counter by index, by SM). Adds to hash map values go
/// straight to memory, aggregated across the warp: their addresses follow the keys, which change
/// from access to access, and holding a sum would only cost the kernel registers.
fn combinable(program: &Program, access: Option<Access>) -> bool {
    match access {
        Some(Access { region: AccessRegion::MapValue(m), .. }) => program
            .maps()
            .get(m as usize)
            .is_some_and(|d| matches!(d.kind, MapKind::Array | MapKind::PerCpuArray)),
        _ => false,
    }
}

/// A map as the GPU sees it: the device address of its memory (header included) and its
/// geometry, which the translation bakes into the code as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMap {
    /// Device address of the map's first byte.
    pub addr: u64,
    /// Its layout.
    pub geometry: Geometry,
    /// Whether others read the map while kernels write it (pinned host memory that host code
    /// or another process reads live): ring records are then published with release ordering,
    /// at a fence per record. A map in GPU memory is read after the kernel completes, which
    /// orders everything, so its records are published without one.
    pub live: bool,
}

impl Options {
    /// Options with the given prefix and context, no result register and pid 0.
    pub fn new(prefix: impl Into<String>, context: Context) -> Options {
        Options {
            prefix: prefix.into(),
            context,
            result: None,
            pid: 0,
            maps: Vec::new(),
            combine: None,
            sm: 90,
            smid: None,
            lookup_cache: Vec::new(),
        }
    }
}

/// A translated program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// Module-level definitions (the local functions), to place before the function that holds
    /// [`body`](Translation::body). Empty for programs without local calls.
    pub functions: String,
    /// The main function: one `{ … }` block, to place where the probe runs.
    pub body: String,
}

/// The PTX version, target and address size of modules the translation writes itself.
pub const MODULE_HEADER: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

/// Translates a verified program.
pub fn translate(verified: &Verified, options: &Options) -> Result<Translation, TranslateError> {
    let p = &options.prefix;
    if !p.starts_with(|c: char| c.is_ascii_alphabetic())
        || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(TranslateError::Prefix(p.clone()));
    }
    let program = verified.program();
    let attach = program.attach();
    let fits = match (&options.context, attach) {
        (Context::Memory(_), AttachPoint::User { .. }) => true,
        (Context::Memory(_), _) => false,
        (Context::Kernel { .. }, AttachPoint::Device(e)) => {
            matches!(e, DeviceEvent::KernelEntry | DeviceEvent::KernelExit)
        }
        (Context::Access { .. }, AttachPoint::Device(e)) => {
            matches!(e, DeviceEvent::GlobalLoad | DeviceEvent::GlobalStore)
        }
        _ => false,
    };
    if !fits {
        let given = match options.context {
            Context::Memory(_) => "memory",
            Context::Kernel { .. } => "kernel entry/exit",
            Context::Access { .. } => "memory access",
        };
        return Err(TranslateError::Context { attach, given });
    }
    for (i, def) in program.maps().iter().enumerate() {
        if let Some(b) = options.maps.get(i) {
            let g = b.geometry;
            if (g.kind, g.key_size, g.value_size) != (def.kind, def.key_size, def.value_size) {
                // Named at the first instruction that references the map.
                let pc = program
                    .decoded()
                    .iter()
                    .find(|d| {
                        matches!(d.insn, Instruction::LoadImm64 { imm: Imm64::Map(m), .. } if m as usize == i)
                    })
                    .map_or(0, |d| d.pc);
                return Err(TranslateError::MapUse {
                    pc,
                    name: def.name.clone(),
                    why: format!(
                        "the program declares a {:?} map of {}-byte keys and {}-byte values, but \
                         it is bound to a {:?} map of {}-byte keys and {}-byte values",
                        def.kind, def.key_size, def.value_size, g.kind, g.key_size, g.value_size
                    ),
                });
            }
        }
    }
    let mut out = Translation::default();
    // Callees first: PTX wants a function defined (or declared) before it is called.
    for f in callee_order(program) {
        let mut e = Emitter::new(verified, options, f);
        e.function()?;
        if f == 0 {
            out.body = e.out;
        } else {
            out.functions.push_str(&e.out);
        }
    }
    Ok(out)
}

/// A whole module with one kernel, `name(.param .u64 arg, .param .u64 out)`, that runs the
/// program once per thread and stores each thread's `r0` at `out[linear thread index]`.
///
/// `arg` is what the program's context needs: for a user attach point, the address of the
/// context's memory (what the conformance suite runs on the GPU); for a global load or store, the
/// address accessed (4 bytes, site 0, the kernel id of `name`); for kernel entry and exit,
/// nothing. So any probe can be run, and checked, on its own. The module is the same in every
/// process: `bpf_get_current_pid_tgid` gives 0 in it.
pub fn kernel_module(verified: &Verified, name: &str) -> Result<String, TranslateError> {
    kernel_module_with(verified, name, &[])
}

/// [`kernel_module`] for a program with maps, bound to the GPU as `maps` say.
pub fn kernel_module_with(
    verified: &Verified,
    name: &str,
    maps: &[DeviceMap],
) -> Result<String, TranslateError> {
    if !is_identifier(name) || name.starts_with("e_") {
        return Err(TranslateError::KernelName(name.to_owned()));
    }
    let (id, arg) = (egpu_ebpf::kernel_id(name), "%egpu_arg".to_string());
    let context = match verified.program().attach() {
        AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
            Context::Kernel { kernel_id: id }
        }
        AttachPoint::Device(e) => Context::Access {
            kernel_id: id,
            addr: arg,
            size: 4,
            site: 0,
            is_store: e == DeviceEvent::GlobalStore,
        },
        _ => Context::Memory(arg),
    };
    let mut options = Options::new("e", context);
    options.result = Some("%egpu_r0".into());
    options.maps = maps.to_vec();
    let t = translate(verified, &options)?;
    Ok(format!(
        "{MODULE_HEADER}\n{functions}\n.visible .entry {name}(\n\t.param .u64 {name}_arg,\n\t.param .u64 {name}_out\n)\n{{\n\t.reg .b64 %egpu_arg, %egpu_out, %egpu_out_off, %egpu_r0;\n\t.reg .b32 %egpu_i<4>;\n\tld.param.u64 %egpu_arg, [{name}_arg];\n\tld.param.u64 %egpu_out, [{name}_out];\n\tmov.b64 %egpu_r0, 0;\n{body}\tmov.u32 %egpu_i0, %ctaid.x;\n\tmov.u32 %egpu_i1, %ntid.x;\n\tmov.u32 %egpu_i2, %tid.x;\n\tmad.lo.u32 %egpu_i0, %egpu_i0, %egpu_i1, %egpu_i2;\n\tmul.wide.u32 %egpu_out_off, %egpu_i0, 8;\n\tadd.s64 %egpu_out, %egpu_out, %egpu_out_off;\n\tst.u64 [%egpu_out], %egpu_r0;\n\tret;\n}}\n",
        functions = t.functions,
        body = t.body,
    ))
}

/// Whether `s` is a PTX identifier: a letter, or `_`/`$` followed by more, then letters, digits,
/// `_` and `$`.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let ok_rest = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => chars.all(ok_rest),
        Some('_' | '$') => s.len() > 1 && chars.all(ok_rest),
        _ => false,
    }
}

/// Functions in an order where each comes after every function it calls.
fn callee_order(program: &Program) -> Vec<usize> {
    fn visit(program: &Program, f: usize, seen: &mut Vec<bool>, order: &mut Vec<usize>) {
        if seen[f] {
            return;
        }
        seen[f] = true;
        for &c in &program.functions()[f].callees {
            visit(program, c, seen, order);
        }
        order.push(f);
    }
    let mut seen = vec![false; program.functions().len()];
    let mut order = Vec::new();
    visit(program, 0, &mut seen, &mut order);
    order
}

/// Where a word of a device context comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    Const(u32),
    Special(&'static str),
    AddrLo,
    AddrHi,
    Warp,
}

/// The 4-byte words of a device context, by offset. The offsets come from the context structs
/// themselves, so the translation cannot drift from the one definition.
fn context_word(context: &Context, offset: usize) -> Word {
    let half = |v: u64, at: usize| Word::Const((v >> (8 * at)) as u32);
    let dims = |o: usize, base: usize, reg: [&'static str; 3]| {
        (base..base + 12).contains(&o).then(|| Word::Special(reg[(o - base) / 4]))
    };
    const TID: [&str; 3] = ["%tid.x", "%tid.y", "%tid.z"];
    const CTAID: [&str; 3] = ["%ctaid.x", "%ctaid.y", "%ctaid.z"];
    const NTID: [&str; 3] = ["%ntid.x", "%ntid.y", "%ntid.z"];
    const NCTAID: [&str; 3] = ["%nctaid.x", "%nctaid.y", "%nctaid.z"];
    match *context {
        Context::Kernel { kernel_id } => {
            type C = KernelCtx;
            match offset {
                o if o == offset_of!(C, kernel_id) => half(kernel_id, 0),
                o if o == offset_of!(C, kernel_id) + 4 => half(kernel_id, 4),
                o if o == offset_of!(C, warp) => Word::Warp,
                o if o == offset_of!(C, lane) => Word::Special("%laneid"),
                o if o == offset_of!(C, sm) => Word::Special("%smid"),
                o => dims(o, offset_of!(C, thread), TID)
                    .or_else(|| dims(o, offset_of!(C, block), CTAID))
                    .or_else(|| dims(o, offset_of!(C, block_dim), NTID))
                    .or_else(|| dims(o, offset_of!(C, grid_dim), NCTAID))
                    .unwrap_or(Word::Const(0)),
            }
        }
        Context::Access { kernel_id, size, site, is_store, .. } => {
            type C = MemAccessCtx;
            match offset {
                o if o == offset_of!(C, addr) => Word::AddrLo,
                o if o == offset_of!(C, addr) + 4 => Word::AddrHi,
                o if o == offset_of!(C, kernel_id) => half(kernel_id, 0),
                o if o == offset_of!(C, kernel_id) + 4 => half(kernel_id, 4),
                o if o == offset_of!(C, size) => Word::Const(size),
                o if o == offset_of!(C, site) => Word::Const(site),
                o if o == offset_of!(C, warp) => Word::Warp,
                o if o == offset_of!(C, lane) => Word::Special("%laneid"),
                o if o == offset_of!(C, sm) => Word::Special("%smid"),
                o if o == offset_of!(C, is_store) => Word::Const(u32::from(is_store)),
                o => dims(o, offset_of!(C, thread), TID)
                    .or_else(|| dims(o, offset_of!(C, block), CTAID))
                    .unwrap_or(Word::Const(0)),
            }
        }
        Context::Memory(_) => Word::Const(0),
    }
}

/// Writes the PTX of one eBPF function.
struct Emitter<'a> {
    verified: &'a Verified,
    program: &'a Program,
    options: &'a Options,
    function: usize,
    out: String,
    /// Bytes of the frame (0: no stack).
    frame: u32,
    /// Whether the frame is kept in registers, one 64-bit register per 8-byte slot, rather than
    /// in a `.local` array (see [`stack_in_registers`]).
    in_registers: bool,
    /// 64-bit registers `k0`, `k1`, … that map helpers use for keys and values.
    words: u32,
}

/// Whether function `f`'s frame can live in registers: every access to it is at a constant,
/// naturally aligned offset of its own frame, and its address reaches nothing the translation
/// does not read directly (an inlined helper's key). Then the frame's address is never needed,
/// and ptxas sees plain registers instead of local memory.
fn stack_in_registers(verified: &Verified, f: usize) -> bool {
    let program = verified.program();
    let escapes = |a: Option<Access>| matches!(a, Some(a) if matches!(a.region, AccessRegion::CallerStack | AccessRegion::Mixed));
    // A pointer into some caller's frame, anywhere, means frames' addresses are passed around.
    let passed_down = program.decoded().iter().any(|d| {
        escapes(verified.access(d.pc))
            || verified.call(d.pc).is_some_and(|c| c.args.iter().any(|&a| escapes(a)))
    });
    if passed_down {
        return false;
    }
    let range = program.functions()[f].start..program.functions()[f].end;
    let direct = |a: Access, bytes: i64| {
        a.offset.is_some_and(|o| o.rem_euclid(8) + bytes <= 8 && o.rem_euclid(bytes) == 0)
    };
    program.decoded().iter().filter(|d| range.contains(&d.pc)).all(|d| match d.insn {
        Instruction::Load { size, .. }
        | Instruction::Store { size, .. }
        | Instruction::Atomic { size, .. } => match verified.access(d.pc) {
            Some(a) if a.region == AccessRegion::OwnStack => direct(a, i64::from(size.bytes())),
            _ => true,
        },
        Instruction::Call(CallTarget::Helper(_) | CallTarget::Reg(_)) => {
            let Some(facts) = verified.call(d.pc) else { return true };
            let id = match d.insn {
                Instruction::Call(CallTarget::Helper(id)) => Some(id),
                _ => verified.callx_helper(d.pc),
            };
            let def = facts.map.and_then(|m| program.maps().get(m as usize));
            let map_helper = matches!(
                id,
                Some(
                    helper_id::MAP_LOOKUP_ELEM
                        | helper_id::MAP_UPDATE_ELEM
                        | helper_id::MAP_DELETE_ELEM
                )
            );
            facts.args.iter().enumerate().all(|(i, a)| match (a, def) {
                (Some(a), Some(def)) if a.region == AccessRegion::OwnStack => {
                    // Map helpers read their key (r2) and value (r3) themselves, from the
                    // frame's slot registers.
                    let array = matches!(def.kind, MapKind::Array | MapKind::PerCpuArray);
                    match i {
                        1 if map_helper && array => direct(*a, 4),
                        1 if map_helper => maps::words_direct(*a, def.key_size),
                        2 if id == Some(helper_id::MAP_UPDATE_ELEM) => {
                            maps::words_direct(*a, def.value_size)
                        }
                        1 if id == Some(helper_id::RINGBUF_OUTPUT) => {
                            maps::words_direct(*a, maps::ring_bytes(facts.max_size, def.value_size))
                        }
                        _ => false,
                    }
                }
                (Some(a), None) => a.region != AccessRegion::OwnStack,
                _ => true,
            })
        }
        _ => true,
    })
}

const fn ptx_bits(size: Size) -> u32 {
    size.bytes() * 8
}

impl<'a> Emitter<'a> {
    fn new(verified: &'a Verified, options: &'a Options, function: usize) -> Emitter<'a> {
        let frame = verified.stack_bytes().get(function).copied().unwrap_or(0).next_multiple_of(8);
        Emitter {
            verified,
            program: verified.program(),
            options,
            function,
            out: String::new(),
            frame,
            in_registers: frame > 0 && stack_in_registers(verified, function),
            words: 0,
        }
    }

    /// The prefix that starts every name the translation declares.
    fn prefix(&self) -> &str {
        &self.options.prefix
    }

    fn line(&mut self, text: impl AsRef<str>) {
        self.out.push('\t');
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// The register of eBPF register `reg`.
    fn reg(&self, reg: Reg) -> String {
        format!("%{}_r{}", self.prefix(), reg.index())
    }

    /// 64-bit scratch register `i` (of 8).
    fn tmp64(&self, i: u8) -> String {
        format!("%{}_t{i}", self.prefix())
    }

    /// 32-bit scratch register `i` (of 8).
    fn tmp32(&self, i: u8) -> String {
        format!("%{}_w{i}", self.prefix())
    }

    /// Predicate `i` (of 3).
    fn pred(&self, i: u8) -> String {
        format!("%{}_q{i}", self.prefix())
    }

    /// The constant `reg` holds at `pc`, when the instruction just before, with no jump or call
    /// landing in between, loads it (`mov rX, imm`, as a count's `+= 1` compiles).
    fn constant_before(&self, pc: usize, reg: Reg) -> Option<i64> {
        let decoded = self.program.decoded();
        let i = decoded.iter().position(|d| d.pc == pc)?;
        let before = decoded.get(i.checked_sub(1)?)?;
        let lands = decoded.iter().any(|d| d.insn.jump_target(d.pc) == Some(pc as i64))
            || self.program.functions().iter().any(|f| f.start == pc);
        match before.insn {
            Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Imm(c) }
                if dst == reg && !lands =>
            {
                Some(i64::from(c))
            }
            _ => None,
        }
    }

    fn label(&self, pc: usize) -> String {
        format!("${}_L{pc}", self.prefix())
    }

    fn func_name(&self, f: usize) -> String {
        format!("{}_f{f}", self.prefix())
    }

    /// Where this thread's SM id is: the kernel's register, or `%smid`.
    fn smid(&self) -> String {
        self.options.smid.clone().unwrap_or_else(|| "%smid".to_owned())
    }

    /// The frame's `.local` array, when it does not live in registers.
    fn local_frame(&self) -> String {
        format!("%{}_stack", self.prefix())
    }

    /// The register of the frame slot holding byte `offset` (from `r10`), and the byte's place
    /// in it, when the frame lives in registers and the verifier proved the offset constant.
    fn frame_slot(&self, access: Option<Access>) -> Option<(String, u32)> {
        if !self.in_registers {
            return None;
        }
        let a = access.filter(|a| a.region == AccessRegion::OwnStack)?;
        let at = i64::from(self.frame) + a.offset?;
        Some((format!("%{}_s{}", self.prefix(), at / 8), (at % 8) as u32))
    }

    fn function(&mut self) -> Result<(), TranslateError> {
        let f = &self.program.functions()[self.function];
        let (start, end) = (f.start, f.end);
        let p = self.prefix().to_owned();
        let main = self.function == 0;
        if main {
            self.out.push_str("\t{\n");
        } else {
            let args = (1..=5).map(|i| format!(".reg .b64 %{p}_a{i}")).collect::<Vec<_>>();
            let name = self.func_name(self.function);
            writeln!(self.out, ".func (.reg .b64 %{p}_ret) {name}({})\n{{", args.join(", "))
                .expect("writing to a String");
        }
        self.line(format!(".reg .b64 %{p}_r<11>;"));
        self.line(format!(".reg .b64 %{p}_t<8>;"));
        self.line(format!(".reg .b32 %{p}_w<8>;"));
        let words_at = self.out.len();
        self.line(format!(".reg .pred %{p}_q<3>;"));
        if self.in_registers {
            let n = self.frame / 8;
            self.line(format!(".reg .b64 %{p}_s<{n}>;"));
            for i in 0..n {
                self.line(format!("mov.b64 %{p}_s{i}, 0;"));
            }
            // The frame's address is never used: every access names its slot.
            let r10 = self.reg(Reg::R10);
            self.line(format!("mov.b64 {r10}, 0;"));
        } else if self.frame > 0 {
            let (stack, frame) = (self.local_frame(), self.frame);
            self.line(format!(".local .align 8 .b8 {stack}[{frame}];"));
            let r10 = self.reg(Reg::R10);
            self.line(format!("mov.u64 {r10}, {stack};"));
            self.line(format!("cvta.local.u64 {r10}, {r10};"));
            self.line(format!("add.s64 {r10}, {r10}, {frame};"));
        }
        if main {
            if let Context::Memory(addr) = &self.options.context {
                let r1 = self.reg(Reg::R1);
                self.line(format!("mov.b64 {r1}, {addr};"));
            }
        } else {
            for i in 1..=5u8 {
                let r = self.reg(Reg::new(i).expect("r1-r5"));
                self.line(format!("mov.b64 {r}, %{p}_a{i};"));
            }
        }
        let targets: BTreeSet<usize> = self
            .program
            .decoded()
            .iter()
            .filter(|d| (start..end).contains(&d.pc))
            .filter_map(|d| d.insn.jump_target(d.pc))
            .map(|t| t as usize)
            .collect();
        let decoded: Vec<_> = self
            .program
            .decoded()
            .iter()
            .filter(|d| (start..end).contains(&d.pc))
            .copied()
            .collect();
        for d in decoded {
            if targets.contains(&d.pc) {
                let l = self.label(d.pc);
                self.out.push_str(&format!("{l}:\n"));
            }
            self.instruction(d.pc, d.insn)?;
        }
        if self.words > 0 {
            self.out.insert_str(words_at, &format!("\t.reg .b64 %{p}_k<{}>;\n", self.words));
        }
        if main {
            self.out.push_str(&format!("${p}_exit:\n"));
            if let Some(result) = &self.options.result {
                let r0 = self.reg(Reg::R0);
                self.line(format!("mov.b64 {result}, {r0};"));
            }
            self.out.push_str("\t}\n");
        } else {
            self.out.push_str("}\n");
        }
        Ok(())
    }

    /// The second operand as a PTX operand of a 64-bit operation (immediates sign-extended).
    fn operand64(&self, src: Operand) -> String {
        match src {
            Operand::Reg(r) => self.reg(r),
            Operand::Imm(i) => (i as i64).to_string(),
        }
    }

    fn instruction(&mut self, pc: usize, insn: Instruction) -> Result<(), TranslateError> {
        match insn {
            Instruction::Alu { op, width: Width::W64, dst, src } => self.alu64(op, dst, src),
            Instruction::Alu { op, width: Width::W32, dst, src } => self.alu32(op, dst, src),
            Instruction::Neg { width, dst } => {
                let d = self.reg(dst);
                match width {
                    Width::W64 => self.line(format!("neg.s64 {d}, {d};")),
                    Width::W32 => {
                        let w0 = self.tmp32(0);
                        self.line(format!("cvt.u32.u64 {w0}, {d};"));
                        self.line(format!("neg.s32 {w0}, {w0};"));
                        self.line(format!("cvt.u64.u32 {d}, {w0};"));
                    }
                }
            }
            Instruction::Endian { order, bits, dst } => self.endian(order, bits, dst),
            Instruction::LoadImm64 { dst, imm } => match imm {
                Imm64::Value(v) => {
                    let d = self.reg(dst);
                    self.line(format!("mov.b64 {d}, {};", v as i64));
                }
                Imm64::Map(m) => {
                    let map = self.map(pc, Some(m))?;
                    let d = self.reg(dst);
                    self.line(format!("mov.b64 {d}, {};", map.addr as i64));
                }
            },
            Instruction::Load { size, signed, dst, base, off } => {
                self.load(pc, size, signed, dst, base, off);
            }
            Instruction::Store { size, base, off, src } => {
                let value = match src {
                    Operand::Reg(r) => self.reg(r),
                    Operand::Imm(i) => {
                        let t3 = self.tmp64(3);
                        self.line(format!("mov.b64 {t3}, {};", i as i64));
                        t3
                    }
                };
                self.store(pc, size, base, off, &value);
            }
            Instruction::Atomic { op, fetch, size, base, off, src } => {
                self.atomic(pc, op, fetch, size, base, off, src);
            }
            Instruction::Jump { .. } => {
                let target = insn.jump_target(pc).expect("a jump has a target") as usize;
                let l = self.label(target);
                self.line(format!("bra {l};"));
            }
            Instruction::Branch { cond, width, dst, src, .. } => {
                let target = insn.jump_target(pc).expect("a branch has a target") as usize;
                self.branch(cond, width, dst, src, target);
            }
            Instruction::Call(CallTarget::Helper(id)) => self.helper(pc, id)?,
            Instruction::Call(CallTarget::Reg(_)) => {
                let id =
                    self.verified.callx_helper(pc).ok_or(TranslateError::VaryingCallx { pc })?;
                self.helper(pc, id)?;
            }
            Instruction::Call(CallTarget::Local(_)) => {
                let target = insn.call_target(pc).expect("a local call has a target") as usize;
                let f = self
                    .program
                    .functions()
                    .iter()
                    .position(|f| f.start == target)
                    .expect("call targets start functions");
                let name = self.func_name(f);
                let args: Vec<String> =
                    (1..=5).map(|i| self.reg(Reg::new(i).expect("r1-r5"))).collect();
                let r0 = self.reg(Reg::R0);
                self.line(format!("call ({r0}), {name}, ({});", args.join(", ")));
            }
            Instruction::Exit => {
                if self.function == 0 {
                    let p = self.prefix().to_owned();
                    self.line(format!("bra ${p}_exit;"));
                } else {
                    let (p, r0) = (self.prefix().to_owned(), self.reg(Reg::R0));
                    self.line(format!("mov.b64 %{p}_ret, {r0};"));
                    self.line("ret;");
                }
            }
        }
        Ok(())
    }

    fn alu64(&mut self, op: AluOp, dst: Reg, src: Operand) {
        let d = self.reg(dst);
        let s = self.operand64(src);
        let simple = match op {
            AluOp::Add => Some("add.s64"),
            AluOp::Sub => Some("sub.s64"),
            AluOp::Mul => Some("mul.lo.s64"),
            AluOp::Or => Some("or.b64"),
            AluOp::And => Some("and.b64"),
            AluOp::Xor => Some("xor.b64"),
            _ => None,
        };
        if let Some(opcode) = simple {
            self.line(format!("{opcode} {d}, {d}, {s};"));
            return;
        }
        match op {
            AluOp::Mov => self.line(format!("mov.b64 {d}, {s};")),
            AluOp::MovSx(bits) => {
                let shift = 64 - u32::from(bits);
                self.line(format!("shl.b64 {d}, {s}, {shift};"));
                self.line(format!("shr.s64 {d}, {d}, {shift};"));
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
                let opcode = match op {
                    AluOp::Lsh => "shl.b64",
                    AluOp::Rsh => "shr.u64",
                    _ => "shr.s64",
                };
                let count = match src {
                    Operand::Imm(i) => (i & 63).to_string(),
                    Operand::Reg(_) => {
                        let w0 = self.tmp32(0);
                        self.line(format!("cvt.u32.u64 {w0}, {s};"));
                        self.line(format!("and.b32 {w0}, {w0}, 63;"));
                        w0
                    }
                };
                self.line(format!("{opcode} {d}, {d}, {count};"));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod => {
                let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
                self.line(format!("mov.b64 {t1}, {s};"));
                self.divide(op, &d, &t0, &t1, 64);
                self.line(format!("mov.b64 {d}, {t0};"));
            }
            _ => unreachable!("handled above"),
        }
    }

    /// `t = d op divisor` with eBPF's rules for zero and `-1` divisors; `divisor` is a register
    /// other than `d` and `t`, and `d` is left as it was.
    fn divide(&mut self, op: AluOp, d: &str, t: &str, divisor: &str, bits: u32) {
        let [q0, q1, q2] = [self.pred(0), self.pred(1), self.pred(2)];
        let (s, u, b) = (format!("s{bits}"), format!("u{bits}"), format!("b{bits}"));
        self.line(format!("setp.eq.{s} {q0}, {divisor}, 0;"));
        match op {
            AluOp::Div | AluOp::Mod => {
                self.line(format!("selp.{b} {divisor}, 1, {divisor}, {q0};"));
                let opcode = if op == AluOp::Div { "div" } else { "rem" };
                self.line(format!("{opcode}.{u} {t}, {d}, {divisor};"));
                if op == AluOp::Div {
                    self.line(format!("@{q0} mov.{b} {t}, 0;"));
                } else {
                    self.line(format!("@{q0} mov.{b} {t}, {d};"));
                }
            }
            _ => {
                self.line(format!("setp.eq.{s} {q1}, {divisor}, -1;"));
                self.line(format!("or.pred {q2}, {q0}, {q1};"));
                self.line(format!("selp.{b} {divisor}, 1, {divisor}, {q2};"));
                if op == AluOp::SDiv {
                    self.line(format!("div.{s} {t}, {d}, {divisor};"));
                    self.line(format!("@{q1} neg.{s} {t}, {d};"));
                    self.line(format!("@{q0} mov.{b} {t}, 0;"));
                } else {
                    self.line(format!("rem.{s} {t}, {d}, {divisor};"));
                    self.line(format!("@{q1} mov.{b} {t}, 0;"));
                    self.line(format!("@{q0} mov.{b} {t}, {d};"));
                }
            }
        }
    }

    fn alu32(&mut self, op: AluOp, dst: Reg, src: Operand) {
        let d = self.reg(dst);
        let [w0, w1, w2] = [self.tmp32(0), self.tmp32(1), self.tmp32(2)];
        let b = match src {
            Operand::Imm(i) => i.to_string(),
            Operand::Reg(r) => {
                let s = self.reg(r);
                self.line(format!("cvt.u32.u64 {w1}, {s};"));
                w1.clone()
            }
        };
        if !matches!(op, AluOp::Mov | AluOp::MovSx(_)) {
            self.line(format!("cvt.u32.u64 {w0}, {d};"));
        }
        match op {
            AluOp::Add => self.line(format!("add.s32 {w0}, {w0}, {b};")),
            AluOp::Sub => self.line(format!("sub.s32 {w0}, {w0}, {b};")),
            AluOp::Mul => self.line(format!("mul.lo.s32 {w0}, {w0}, {b};")),
            AluOp::Or => self.line(format!("or.b32 {w0}, {w0}, {b};")),
            AluOp::And => self.line(format!("and.b32 {w0}, {w0}, {b};")),
            AluOp::Xor => self.line(format!("xor.b32 {w0}, {w0}, {b};")),
            AluOp::Mov => self.line(format!("mov.b32 {w0}, {b};")),
            AluOp::MovSx(bits) => {
                let shift = 32 - u32::from(bits);
                self.line(format!("shl.b32 {w0}, {b}, {shift};"));
                self.line(format!("shr.s32 {w0}, {w0}, {shift};"));
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
                let opcode = match op {
                    AluOp::Lsh => "shl.b32",
                    AluOp::Rsh => "shr.u32",
                    _ => "shr.s32",
                };
                let count = match src {
                    Operand::Imm(i) => (i & 31).to_string(),
                    Operand::Reg(_) => {
                        self.line(format!("and.b32 {w1}, {w1}, 31;"));
                        w1.clone()
                    }
                };
                self.line(format!("{opcode} {w0}, {w0}, {count};"));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod => {
                self.line(format!("mov.b32 {w2}, {b};"));
                let w3 = self.tmp32(3);
                self.divide(op, &w0, &w3, &w2, 32);
                self.line(format!("mov.b32 {w0}, {w3};"));
            }
        }
        self.line(format!("cvt.u64.u32 {d}, {w0};"));
    }

    fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg) {
        let d = self.reg(dst);
        let [w0, w1, w2, w3] = [self.tmp32(0), self.tmp32(1), self.tmp32(2), self.tmp32(3)];
        match (order, bits) {
            (ByteOrder::Le, 16) => self.line(format!("and.b64 {d}, {d}, 65535;")),
            (ByteOrder::Le, 32) => self.line(format!("and.b64 {d}, {d}, 4294967295;")),
            (ByteOrder::Le, _) => {}
            (_, 16) => {
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                self.line(format!("mov.b32 {w1}, 0;"));
                self.line(format!("prmt.b32 {w0}, {w0}, {w1}, 0x4401;"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
            (_, 32) => {
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                self.line(format!("prmt.b32 {w0}, {w0}, {w0}, 0x0123;"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
            _ => {
                self.line(format!("mov.b64 {{{w0}, {w1}}}, {d};"));
                self.line(format!("prmt.b32 {w2}, {w0}, {w0}, 0x0123;"));
                self.line(format!("prmt.b32 {w3}, {w1}, {w1}, 0x0123;"));
                self.line(format!("mov.b64 {d}, {{{w3}, {w2}}};"));
            }
        }
    }

    /// The address operand and state space of an access, or `None` when it must go byte by byte
    /// (the generic address is then in `t2`).
    fn address(&mut self, pc: usize, base: Reg, off: i16) -> (String, &'static str, bool) {
        let access = self.verified.access(pc);
        if let Some(Access { region: AccessRegion::OwnStack, offset: Some(o), aligned: true }) =
            access
        {
            let at = i64::from(self.frame) + o;
            return (format!("[{}+{at}]", self.local_frame()), ".local", true);
        }
        let aligned = access.is_some_and(|a| a.aligned);
        let b = self.reg(base);
        // Map memory is global memory: GPU memory, or host memory mapped into the GPU.
        let global = matches!(access, Some(Access { region: AccessRegion::MapValue(_), .. }));
        if aligned {
            (format!("[{b}+{off}]"), if global { ".global" } else { "" }, true)
        } else {
            let t2 = self.tmp64(2);
            self.line(format!("add.s64 {t2}, {b}, {off};"));
            (t2, "", false)
        }
    }

    fn load(&mut self, pc: usize, size: Size, signed: bool, dst: Reg, base: Reg, off: i16) {
        let d = self.reg(dst);
        let bits = ptx_bits(size);
        if let (Context::Kernel { .. } | Context::Access { .. }, Some(a)) =
            (&self.options.context, self.verified.access(pc))
            && let (AccessRegion::Context, Some(o)) = (a.region, a.offset)
        {
            self.context_load(o as usize, size, signed, &d);
            return;
        }
        if let Some((slot, byte)) = self.frame_slot(self.verified.access(pc)) {
            match (size, signed) {
                (Size::DW, _) => self.line(format!("mov.b64 {d}, {slot};")),
                (_, false) => self.line(format!("bfe.u64 {d}, {slot}, {}, {bits};", byte * 8)),
                (_, true) => self.line(format!("bfe.s64 {d}, {slot}, {}, {bits};", byte * 8)),
            }
            return;
        }
        let (addr, space, aligned) = self.address(pc, base, off);
        let w0 = self.tmp32(0);
        if !aligned {
            let (t0, t1) = (self.tmp64(0), self.tmp64(1));
            self.line(format!("mov.b64 {t1}, 0;"));
            for i in (0..size.bytes()).rev() {
                self.line(format!("ld.u8 {w0}, [{addr}+{i}];"));
                self.line(format!("cvt.u64.u32 {t0}, {w0};"));
                self.line(format!("shl.b64 {t1}, {t1}, 8;"));
                self.line(format!("or.b64 {t1}, {t1}, {t0};"));
            }
            if signed && bits < 64 {
                let shift = 64 - bits;
                self.line(format!("shl.b64 {t1}, {t1}, {shift};"));
                self.line(format!("shr.s64 {t1}, {t1}, {shift};"));
            }
            self.line(format!("mov.b64 {d}, {t1};"));
            return;
        }
        match (size, signed) {
            (Size::DW, _) => self.line(format!("ld{space}.u64 {d}, {addr};")),
            (_, false) => {
                self.line(format!("ld{space}.u{bits} {w0}, {addr};"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
            (_, true) => {
                self.line(format!("ld{space}.s{bits} {w0}, {addr};"));
                self.line(format!("cvt.s64.s32 {d}, {w0};"));
            }
        }
    }

    /// A load from a device context: the value comes from the words that hold the field.
    fn context_load(&mut self, offset: usize, size: Size, signed: bool, d: &str) {
        let context = self.options.context.clone();
        let [w0, w1] = [self.tmp32(0), self.tmp32(1)];
        if size == Size::DW {
            if let Context::Access { addr, .. } = &context
                && offset == offset_of!(MemAccessCtx, addr)
            {
                self.line(format!("mov.b64 {d}, {addr};"));
                return;
            }
            self.read_context_word(&context, offset, &w0);
            self.read_context_word(&context, offset + 4, &w1);
            self.line(format!("mov.b64 {d}, {{{w0}, {w1}}};"));
            return;
        }
        self.read_context_word(&context, offset & !3, &w0);
        let bits = ptx_bits(size);
        if bits < 32 {
            let at = (offset & 3) * 8;
            let ty = if signed { "s32" } else { "u32" };
            self.line(format!("bfe.{ty} {w0}, {w0}, {at}, {bits};"));
        }
        let ty = if signed { "s" } else { "u" };
        self.line(format!("cvt.{ty}64.{ty}32 {d}, {w0};"));
    }

    fn read_context_word(&mut self, context: &Context, offset: usize, into: &str) {
        match context_word(context, offset) {
            Word::Const(v) => self.line(format!("mov.b32 {into}, {v};")),
            Word::Special(reg) => {
                let reg = if reg == "%smid" { self.smid() } else { reg.to_owned() };
                self.line(format!("mov.u32 {into}, {reg};"));
            }
            word @ (Word::AddrLo | Word::AddrHi) => {
                let Context::Access { addr, .. } = context else { unreachable!("access words") };
                let t0 = self.tmp64(0);
                let shift = if word == Word::AddrHi { 32 } else { 0 };
                self.line(format!("shr.u64 {t0}, {addr}, {shift};"));
                self.line(format!("cvt.u32.u64 {into}, {t0};"));
            }
            Word::Warp => {
                // (tid.z * ntid.y + tid.y) * ntid.x + tid.x, over 32.
                let [w2, w3] = [self.tmp32(2), self.tmp32(3)];
                self.line(format!("mov.u32 {w2}, %tid.z;"));
                self.line(format!("mov.u32 {w3}, %ntid.y;"));
                self.line(format!("mov.u32 {into}, %tid.y;"));
                self.line(format!("mad.lo.u32 {w2}, {w2}, {w3}, {into};"));
                self.line(format!("mov.u32 {w3}, %ntid.x;"));
                self.line(format!("mov.u32 {into}, %tid.x;"));
                self.line(format!("mad.lo.u32 {w2}, {w2}, {w3}, {into};"));
                self.line(format!("shr.u32 {into}, {w2}, 5;"));
            }
        }
    }

    fn store(&mut self, pc: usize, size: Size, base: Reg, off: i16, value: &str) {
        let bits = ptx_bits(size);
        if let Some((slot, byte)) = self.frame_slot(self.verified.access(pc)) {
            if size == Size::DW {
                self.line(format!("mov.b64 {slot}, {value};"));
            } else {
                self.line(format!("bfi.b64 {slot}, {value}, {slot}, {}, {bits};", byte * 8));
            }
            return;
        }
        let (addr, space, aligned) = self.address(pc, base, off);
        let [t0, w0] = [self.tmp64(0), self.tmp32(0)];
        if !aligned {
            for i in 0..size.bytes() {
                self.line(format!("shr.u64 {t0}, {value}, {};", 8 * i));
                self.line(format!("cvt.u32.u64 {w0}, {t0};"));
                self.line(format!("st.u8 [{addr}+{i}], {w0};"));
            }
            return;
        }
        if size == Size::DW {
            self.line(format!("st{space}.u64 {addr}, {value};"));
        } else {
            self.line(format!("cvt.u32.u64 {w0}, {value};"));
            self.line(format!("st{space}.u{bits} {addr}, {w0};"));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        pc: usize,
        op: AtomicOp,
        fetch: bool,
        size: Size,
        base: Reg,
        off: i16,
        src: Reg,
    ) {
        let region = self.verified.access(pc).map(|a| a.region);
        let on_stack = matches!(region, Some(AccessRegion::OwnStack | AccessRegion::CallerStack));
        let p = self.prefix().to_owned();
        let bits = ptx_bits(size);
        if let Some((slot, byte)) = self.frame_slot(self.verified.access(pc)) {
            self.slot_atomic(op, fetch, bits, &slot, byte * 8, src);
            return;
        }
        let s = self.reg(src);
        let r0 = self.reg(Reg::R0);
        let (old, new, cmp) = if bits == 64 {
            (self.tmp64(0), s.clone(), r0.clone())
        } else {
            let [w0, w1, w2] = [self.tmp32(0), self.tmp32(1), self.tmp32(2)];
            self.line(format!("cvt.u32.u64 {w1}, {s};"));
            if op == AtomicOp::CmpXchg {
                self.line(format!("cvt.u32.u64 {w2}, {r0};"));
            }
            (w0, w1, w2)
        };
        let b = self.reg(base);
        let (u, bt) = (format!("u{bits}"), format!("b{bits}"));
        let name = match op {
            AtomicOp::Add => "add",
            AtomicOp::Or => "or",
            AtomicOp::And => "and",
            AtomicOp::Xor => "xor",
            AtomicOp::Xchg => "exch",
            AtomicOp::CmpXchg => "cas",
        };
        let ty = if op == AtomicOp::Add { &u } else { &bt };
        let plain = |e: &mut Self| {
            // The thread's own memory: a read-modify-write nobody else can see in between.
            e.line(format!("ld.{u} {old}, [{b}+{off}];"));
            let t1 = if bits == 64 { e.tmp64(1) } else { e.tmp32(3) };
            match op {
                AtomicOp::Xchg => e.line(format!("mov.{bt} {t1}, {new};")),
                AtomicOp::CmpXchg => {
                    let q0 = e.pred(0);
                    e.line(format!("setp.eq.{u} {q0}, {old}, {cmp};"));
                    e.line(format!("selp.{bt} {t1}, {new}, {old}, {q0};"));
                }
                _ => e.line(format!("{name}.{ty} {t1}, {old}, {new};")),
            }
            e.line(format!("st.{u} [{b}+{off}], {t1};"));
        };
        let space = if matches!(region, Some(AccessRegion::MapValue(_))) { ".global" } else { "" };
        let atom = |e: &mut Self| {
            if op == AtomicOp::CmpXchg {
                e.line(format!("atom{space}.cas.{bt} {old}, [{b}+{off}], {cmp}, {new};"));
            } else if fetch || op == AtomicOp::Xchg {
                e.line(format!("atom{space}.{name}.{ty} {old}, [{b}+{off}], {new};"));
            } else {
                e.line(format!("red{space}.{name}.{ty} [{b}+{off}], {new};"));
            }
        };
        let add = op == AtomicOp::Add && !fetch && bits == 64;
        if let (Some([ca, cv]), true, true) =
            (&self.options.combine, add, combinable(self.program, self.verified.access(pc)))
        {
            let (t3, q0, q1) = (self.tmp64(3), self.pred(0), self.pred(1));
            self.line(format!("add.s64 {t3}, {b}, {off};"));
            self.line(format!("setp.eq.u64 {q0}, {t3}, {ca};"));
            self.line(format!("@{q0} bra ${p}_C{pc};"));
            self.line(format!("setp.eq.u64 {q1}, {ca}, 0;"));
            self.line(format!("@{q1} bra ${p}_F{pc}_done;"));
            if self.options.sm >= 80 {
                let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| self.tmp32(i));
                let (q2, t2) = (self.pred(2), self.tmp64(2));
                let label = format!("${p}_F{pc}");
                let code = warp_add(ca, cv, None, "", [&w0, &w1, &w2, &w3], &q2, &t2, &label);
                self.out.push_str(&code);
            } else {
                self.line(format!("red.add.u64 [{ca}], {cv};"));
                self.out.push_str(&format!("${p}_F{pc}_done:\n"));
            }
            self.line(format!("mov.b64 {ca}, {t3};"));
            self.line(format!("mov.b64 {cv}, 0;"));
            self.out.push_str(&format!("${p}_C{pc}:\n"));
            self.line(format!("add.s64 {cv}, {cv}, {s};"));
            return;
        }
        match region {
            _ if on_stack => plain(self),
            Some(AccessRegion::MapValue(_)) if add && self.options.sm >= 80 => {
                // One atomic per group of lanes adding to the same value.
                let [w0, w1, w2, w3] = [0, 1, 2, 3].map(|i| self.tmp32(i));
                let (t3, q2, t2) = (self.tmp64(3), self.pred(2), self.tmp64(2));
                self.line(format!("add.s64 {t3}, {b}, {off};"));
                let label = format!("${p}_W{pc}");
                let known = self.constant_before(pc, src);
                let w = [&*w0, &w1, &w2, &w3];
                let code = warp_add(&t3, &s, known, ".global", w, &q2, &t2, &label);
                self.out.push_str(&code);
            }
            Some(AccessRegion::Context | AccessRegion::MapValue(_)) => atom(self),
            _ => {
                // Different regions on different paths: the stack is local memory, where PTX
                // has no atomics, so decide at run time.
                let (t3, q0) = (self.tmp64(3), self.pred(0));
                self.line(format!("add.s64 {t3}, {b}, {off};"));
                self.line(format!("isspacep.local {q0}, {t3};"));
                self.line(format!("@!{q0} bra ${p}_A{pc};"));
                plain(self);
                self.line(format!("bra ${p}_B{pc};"));
                self.out.push_str(&format!("${p}_A{pc}:\n"));
                atom(self);
                self.out.push_str(&format!("${p}_B{pc}:\n"));
            }
        }
        let fetches = fetch || matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg);
        if fetches {
            let into = if op == AtomicOp::CmpXchg { r0 } else { s };
            if bits == 64 {
                self.line(format!("mov.b64 {into}, {old};"));
            } else {
                self.line(format!("cvt.u64.u32 {into}, {old};"));
            }
        }
    }

    /// An atomic on a frame slot held in a register: only this thread sees it, so it is a plain
    /// read-modify-write of the slot's bits.
    fn slot_atomic(&mut self, op: AtomicOp, fetch: bool, bits: u32, slot: &str, at: u32, src: Reg) {
        let [t0, t1, t2] = [self.tmp64(0), self.tmp64(1), self.tmp64(2)];
        let (s, r0, q0) = (self.reg(src), self.reg(Reg::R0), self.pred(0));
        let field = |e: &mut Self, into: &str, from: &str| {
            if bits == 64 {
                e.line(format!("mov.b64 {into}, {from};"));
            } else {
                e.line(format!("bfe.u64 {into}, {from}, {at}, {bits};"));
            }
        };
        field(self, &t0, slot);
        match op {
            AtomicOp::Add => self.line(format!("add.s64 {t1}, {t0}, {s};")),
            AtomicOp::Or => self.line(format!("or.b64 {t1}, {t0}, {s};")),
            AtomicOp::And => self.line(format!("and.b64 {t1}, {t0}, {s};")),
            AtomicOp::Xor => self.line(format!("xor.b64 {t1}, {t0}, {s};")),
            AtomicOp::Xchg => self.line(format!("mov.b64 {t1}, {s};")),
            AtomicOp::CmpXchg => {
                if bits == 64 {
                    self.line(format!("mov.b64 {t2}, {r0};"));
                } else {
                    self.line(format!("bfe.u64 {t2}, {r0}, 0, {bits};"));
                }
                self.line(format!("setp.eq.u64 {q0}, {t0}, {t2};"));
                self.line(format!("selp.b64 {t1}, {s}, {t0}, {q0};"));
            }
        }
        if bits == 64 {
            self.line(format!("mov.b64 {slot}, {t1};"));
        } else {
            self.line(format!("bfi.b64 {slot}, {t1}, {slot}, {at}, {bits};"));
        }
        match op {
            AtomicOp::CmpXchg => self.line(format!("mov.b64 {r0}, {t0};")),
            AtomicOp::Xchg => self.line(format!("mov.b64 {s}, {t0};")),
            _ if fetch => self.line(format!("mov.b64 {s}, {t0};")),
            _ => {}
        }
    }

    fn branch(&mut self, cond: JmpCond, width: Width, dst: Reg, src: Operand, target: usize) {
        let q0 = self.pred(0);
        let l = self.label(target);
        let (a, b, bits) = match width {
            Width::W64 => (self.reg(dst), self.operand64(src), 64),
            Width::W32 => {
                let [w0, w1] = [self.tmp32(0), self.tmp32(1)];
                let d = self.reg(dst);
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                let b = match src {
                    Operand::Imm(i) => i.to_string(),
                    Operand::Reg(r) => {
                        let s = self.reg(r);
                        self.line(format!("cvt.u32.u64 {w1}, {s};"));
                        w1
                    }
                };
                (w0, b, 32)
            }
        };
        let (cmp, signed) = match cond {
            JmpCond::Eq => ("eq", false),
            JmpCond::Ne => ("ne", false),
            JmpCond::Gt => ("gt", false),
            JmpCond::Ge => ("ge", false),
            JmpCond::Lt => ("lt", false),
            JmpCond::Le => ("le", false),
            JmpCond::Sgt => ("gt", true),
            JmpCond::Sge => ("ge", true),
            JmpCond::Slt => ("lt", true),
            JmpCond::Sle => ("le", true),
            JmpCond::Set => {
                let t = if bits == 64 { self.tmp64(0) } else { self.tmp32(2) };
                self.line(format!("and.b{bits} {t}, {a}, {b};"));
                self.line(format!("setp.ne.u{bits} {q0}, {t}, 0;"));
                self.line(format!("@{q0} bra {l};"));
                return;
            }
        };
        let ty = if signed { "s" } else { "u" };
        self.line(format!("setp.{cmp}.{ty}{bits} {q0}, {a}, {b};"));
        self.line(format!("@{q0} bra {l};"));
    }

    fn helper(&mut self, pc: usize, id: u32) -> Result<(), TranslateError> {
        let r0 = self.reg(Reg::R0);
        let w0 = self.tmp32(0);
        match id {
            helper_id::KTIME_GET_NS => self.line(format!("mov.u64 {r0}, %globaltimer;")),
            helper_id::GET_SMP_PROCESSOR_ID => {
                let smid = self.smid();
                self.line(format!("mov.u32 {w0}, {smid};"));
                self.line(format!("cvt.u64.u32 {r0}, {w0};"));
            }
            helper_id::GET_CURRENT_PID_TGID => {
                let v = u64::from(self.options.pid) << 32;
                self.line(format!("mov.b64 {r0}, {};", v as i64));
            }
            helper_id::GET_PRANDOM_U32 => {
                // A hash of the clock and the thread's place in the grid (splitmix64's finaliser).
                let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
                self.line(format!("mov.u64 {t0}, %clock64;"));
                self.line(format!("mov.u32 {w0}, %tid.x;"));
                self.line(format!("cvt.u64.u32 {t1}, {w0};"));
                self.line(format!("mad.lo.u64 {t0}, {t1}, -7046029254386353131, {t0};"));
                self.line(format!("mov.u32 {w0}, %ctaid.x;"));
                self.line(format!("cvt.u64.u32 {t1}, {w0};"));
                self.line(format!("mad.lo.u64 {t0}, {t1}, 7640891576956012809, {t0};"));
                for (shift, mul) in [(30, -4658895280553007687i64), (27, -7723592293110705685)] {
                    self.line(format!("shr.u64 {t1}, {t0}, {shift};"));
                    self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
                    self.line(format!("mul.lo.u64 {t0}, {t0}, {mul};"));
                }
                self.line(format!("shr.u64 {t1}, {t0}, 31;"));
                self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
                self.line(format!("and.b64 {r0}, {t0}, 4294967295;"));
            }
            helper_id::MAP_LOOKUP_ELEM
            | helper_id::MAP_UPDATE_ELEM
            | helper_id::MAP_DELETE_ELEM => {
                self.map_helper(pc, id)?;
            }
            helper_id::RINGBUF_OUTPUT => self.ring_output(pc)?,
            _ => return self.unsupported(pc, id),
        }
        Ok(())
    }
}
