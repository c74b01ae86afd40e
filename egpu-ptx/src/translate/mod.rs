//! eBPF → PTX: the translation of verified programs into PTX that runs inside a kernel.
//!
//! The input is a [`Verified`] program, never a raw one: the GPU has no memory protection, so
//! only what the verifier proved safe reaches it, and the translation leans on what the verifier
//! learned. For every load and store it knows the region reached
//! ([`Access`](egpu_ebpf::verifier::Access)), so
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
//! on arrays and hash maps (per-CPU ones too) and `bpf_ringbuf_output` (`maps.rs`, below). A
//! program calling another helper is refused with [`TranslateError::Helper`] before any kernel
//! runs it.
//!
//! # The code
//!
//! Organised as a compiler back end: one emitter writes the PTX of one eBPF function, and each
//! class of instruction is lowered in a file of its own (`P` below is the
//! [`prefix`](Options::prefix)).
//!
//! | file | what it holds or lowers |
//! |---|---|
//! | `mod.rs` | the entry points: [`translate`] (the options checked against the program, then each function, callees first), [`kernel_module`] and [`kernel_module_with`] |
//! | `options.rs` | what the translation is given and gives back: [`Options`], [`Context`], [`DeviceMap`], [`Translation`] |
//! | `error.rs` | [`TranslateError`] |
//! | `emit.rs` | the emitter: one function as a `{ … }` block or a `.func`, its prologue (registers, frame, arguments), a label at every jump target, and each instruction handed to the file of its class |
//! | `regs.rs` | every name the translation declares, each starting with the prefix: eBPF registers `%P_r0`…`%P_r10`, 64-bit scratch `%P_t0`…`%P_t7`, 32-bit scratch `%P_w0`…`%P_w7`, predicates `%P_q0`…`%P_q2`, the map helpers' key and value words `%P_k…`, frame slots `%P_s…`, labels `$P_…` and functions `P_f…` |
//! | `frame.rs` | the stack frame: one register per 8-byte slot when its address never escapes, a `.local` array otherwise |
//! | `alu.rs` | ALU and ALU64 (RFC 9669's division, shift and sign-extension rules), `neg`, byte swaps, and `lddw` (64-bit constants and map addresses) |
//! | `memory.rs` | loads and stores: a frame slot's bits, a `.local` or global address, byte by byte when unaligned; a device context's fields as special registers and site values |
//! | `atomic.rs` | atomics: a plain read-modify-write on the stack, `atom`/`red` on map values, adds aggregated across a warp or combined per thread ([`combines`]) |
//! | `jump.rs` | jumps, conditional branches, calls (of helpers, through `callx`, of local functions) and `exit` |
//! | `helpers.rs` | the helpers other than the maps' (clock, random numbers, SM id, pid), and the refusal of any other |
//! | `maps.rs` | the map helpers on arrays and ring buffers, with the map's geometry as constants (and [`lookups_and_removals`]) |
//! | `hash.rs` | the map helpers on hash maps: the search inline, or a call of a `.func` the module's translations share ([`Options::outline`]) |
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

mod alu;
mod atomic;
mod batch;
mod defer;
mod emit;
mod error;
mod frame;
mod hash;
mod helpers;
mod jump;
mod keys;
mod maps;
mod memory;
mod options;
mod regs;
mod spread;

use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{AttachPoint, DeviceEvent, Imm64, Instruction, MapKind, MemAccessCtx, Program};

pub use atomic::combines;
pub(crate) use atomic::warp_add;
pub use batch::{Addend, SiteConstants, SummaryAdd, batchable, summary};
pub use defer::Defer;
pub use error::TranslateError;
pub use keys::{kernel_first, kernel_keyed};
pub use maps::{RING_BATCH, close_ring_batch, lookups_and_removals};
pub use options::{CacheKey, Context, Counts, DeviceMap, LookupCache, Options, Translation};
pub use spread::{adds_only, reads_only};

use emit::Emitter;

/// The PTX version, target and address size of modules the translation writes itself.
pub const MODULE_HEADER: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

/// Translates a verified program.
pub fn translate(verified: &Verified, options: &Options) -> Result<Translation, TranslateError> {
    // bpf_loop calls are loops of local calls in what engines run.
    let verified = verified.runnable();
    check(verified, options)?;
    let mut out = Translation::default();
    // Callees first: PTX wants a function defined (or declared) before it is called.
    for f in callee_order(verified.program()) {
        let mut e = Emitter::new(verified, options, f);
        e.function()?;
        out.shared.append(&mut e.shared);
        if f == 0 {
            out.body = e.out;
            out.deferred = e.deferred;
        } else {
            out.functions.push_str(&e.out);
        }
    }
    Ok(out)
}

/// Checks the options against the program: a valid prefix, a context that fits the attach point,
/// and map bindings that agree with the maps the program declares.
fn check(verified: &Verified, options: &Options) -> Result<(), TranslateError> {
    let program = verified.program();
    let p = &options.prefix;
    if !p.starts_with(|c: char| c.is_ascii_alphabetic())
        || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(TranslateError::Prefix(p.clone()));
    }
    let attach = program.attach_point();
    let fits = match (&options.context, attach) {
        (Context::Memory(_), AttachPoint::User { .. }) => true,
        (Context::Memory(_), _) => false,
        (Context::Kernel { .. }, AttachPoint::Device(e)) => {
            matches!(e, DeviceEvent::KernelEntry | DeviceEvent::KernelExit)
        }
        (Context::Access { .. }, AttachPoint::Device(e)) => {
            matches!(
                e,
                DeviceEvent::GlobalLoad | DeviceEvent::GlobalStore | DeviceEvent::GlobalAtomic
            )
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
    let adds = options.maps.iter().any(|b| b.spread > 0).then(|| adds_only(verified));
    for (i, def) in program.maps().iter().enumerate() {
        if let Some(b) = options.maps.get(i) {
            let g = b.geometry;
            let spread_ok = b.spread == 0
                || (b.spread.is_power_of_two()
                    && b.spread <= 1024
                    && !b.live
                    && adds.as_ref().is_some_and(|a| a.get(i) == Some(&true)));
            if !spread_ok {
                return Err(TranslateError::MapUse {
                    pc: 0,
                    name: def.name.clone(),
                    why: format!(
                        "bound to {} per-SM copies, which needs a power of two up to 1024, GPU \
                         memory, and a program that only adds to the map's values",
                        b.spread
                    ),
                });
            }
            if b.drained && (g.kind != MapKind::RingBuf || b.live) {
                return Err(TranslateError::MapUse {
                    pc: 0,
                    name: def.name.clone(),
                    why: "bound as drained while kernels run, which only a ring buffer in GPU \
                          memory is"
                        .into(),
                });
            }
            if (g.kind, g.key_size, g.value_size) != (def.kind, def.key_size, def.value_size) {
                // Named at the first instruction that references the map.
                let pc = program
                    .decoded()
                    .iter()
                    .find(|d| {
                        matches!(d.insn, Instruction::LoadImm64 { imm: Imm64::Map(m) | Imm64::MapValue { map: m, .. }, .. } if m as usize == i)
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
    Ok(())
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
    let context = match verified.program().attach_point() {
        AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
            Context::Kernel { kernel_id: id }
        }
        AttachPoint::Device(e) => {
            let mut c = Context::load_store(id, arg, 4, 0, e != DeviceEvent::GlobalLoad);
            if let (Context::Access { class, op, fetch, .. }, DeviceEvent::GlobalAtomic) =
                (&mut c, e)
            {
                (*class, *op, *fetch) = (MemAccessCtx::ATOMIC, MemAccessCtx::OP_ADD, true);
            }
            c
        }
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
