//! The CPU VM: eBPF programs run by rbpf, through egpu's legalisation.
//!
//! A [`Vm`] loads one [`Verified`] program: what the [verifier](egpu_ebpf::verifier) accepted,
//! once, for every engine (no engine runs anything else, and none verifies again). It is
//! legalised into instructions rbpf 0.4.1 executes
//! correctly (module `legalise`) and runs in rbpf's JIT where the code fits the JIT's single
//! page and the machine is x86-64, or else in rbpf's interpreter. Both engines give the same
//! results on every program the conformance suite holds.
//!
//! rbpf's VMs are neither `Send` nor `Sync`, and neither is [`Vm`]: make one per thread.
//!
//! ```
//! use egpu_ebpf::verifier::verify;
//! use egpu_ebpf::{AttachPoint, Program, assemble};
//! use egpu_vm::Vm;
//!
//! let program = Program::new(
//!     assemble("ldxw %r0, [%r1+4]\nadd %r0, 1\nexit")?,
//!     vec![],
//!     AttachPoint::User { ctx_size: 8 },
//! )?;
//! let verified = verify(&program)?; // once, whichever engines run it
//! let mut vm = Vm::new(&verified)?;
//! let mut ctx = [0u8, 0, 0, 0, 41, 0, 0, 0];
//! assert_eq!(vm.run(&mut ctx)?, 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod helpers;
mod legalise;

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{Instruction, MapDef, MapKind, Program};
use egpu_maps::layout::Geometry;
use egpu_maps::{Placement, RawMap};
use legalise::MapAddress;
use thiserror::Error;

pub use helpers::Fault;
pub use helpers::native;
use legalise::{SCRATCH_BYTES, STACK_BYTES};

/// Which rbpf engine runs a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// rbpf's x86-64 JIT: native code, no run-time checks (the verifier's proof stands in).
    Jit,
    /// rbpf's interpreter: checks every memory access.
    Interpreter,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Jit => "cpu-jit",
            Engine::Interpreter => "cpu-interpreter",
        })
    }
}

/// Which engine to load a program for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineChoice {
    /// The JIT where it applies, the interpreter otherwise.
    #[default]
    Auto,
    /// The JIT, or an error saying why it does not apply.
    Jit,
    /// The interpreter.
    Interpreter,
}

/// Why the JIT does not run a program.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JitRefusal {
    /// rbpf's JIT emits x86-64 code only.
    #[error("rbpf's JIT emits x86-64 code only")]
    UnsupportedArch,
    /// The code would not fit rbpf's single 4 KiB code page.
    #[error("the code may need {estimate} bytes, more than rbpf's JIT page of {limit}")]
    CodeTooLarge {
        /// Upper bound of the code size.
        estimate: usize,
        /// The page size.
        limit: usize,
    },
    /// rbpf's JIT compiler failed.
    #[error("rbpf's JIT failed: {0}")]
    Compiler(String),
}

/// A program the VM cannot load.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A call to a helper that is not in the table or that the CPU VM does not provide.
    #[error("instruction {pc}: helper {id}{} is not available on the CPU", helper_name(*id))]
    UnknownHelper {
        /// The instruction.
        pc: usize,
        /// The helper number.
        id: u32,
    },
    /// The maps given do not match the program's map table.
    #[error("the program's map table has {expected} maps; {given} were given")]
    MapCount {
        /// Entries of the program's table.
        expected: usize,
        /// Maps given.
        given: usize,
    },
    /// A map given, or made, for an entry of the program's map table does not fit it.
    #[error("map {index} (`{name}`): {reason}")]
    Map {
        /// The entry of the table.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The legalised program is longer than rbpf's interpreter can run.
    #[error(
        "the legalised program has {slots} instructions, more than rbpf runs correctly ({max})"
    )]
    TooLarge {
        /// Slots after legalisation.
        slots: usize,
        /// The limit.
        max: usize,
    },
    /// A jump whose legalised offset does not fit in 16 bits.
    #[error("instruction {pc}: the jump is too far for rbpf after legalisation")]
    JumpTooFar {
        /// The instruction.
        pc: usize,
    },
    /// [`EngineChoice::Jit`] was asked for and the JIT does not apply.
    #[error("the JIT cannot run this program: {0}")]
    Jit(#[from] JitRefusal),
    /// rbpf refused the legalised program (a bug in egpu).
    #[error("rbpf refused the program: {0}")]
    Rbpf(String),
}

fn helper_name(id: u32) -> String {
    egpu_ebpf::helpers::helper(id).map(|h| format!(" ({})", h.name)).unwrap_or_default()
}

/// A run that did not complete.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RunError {
    /// The context is shorter than the program reads.
    #[error("the context has {len} bytes; the program needs {need}")]
    ContextTooShort {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The context type does not match the attach point's.
    #[error("the context is {len} bytes; the program's attach point takes {expected}")]
    ContextSize {
        /// Bytes given.
        len: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// A helper found the program at fault (the run's result is discarded).
    #[error("the program faulted in a helper: {0:?}")]
    Fault(Fault),
    /// rbpf's interpreter stopped the program (an access outside its memory, for example).
    #[error("the interpreter stopped the program: {0}")]
    Interpreter(String),
}

/// One program loaded into rbpf, ready to run on this thread.
pub struct Vm {
    // Declared first so it is dropped first: it borrows `code` and refers to `stack`.
    rbpf: rbpf::EbpfVmRaw<'static>,
    #[expect(dead_code, reason = "owns the bytes `rbpf` borrows")]
    code: Box<[u8]>,
    #[expect(dead_code, reason = "owns the stack block the legalised code addresses")]
    stack: Box<[u64]>,
    stack_range: (u64, u64),
    /// The maps of the program's table; legalised code holds the address of each element, so
    /// the slice is never resized.
    maps: Box<[RawMap]>,
    /// Each map's memory, for the interpreter's checks of atomics.
    map_ranges: Box<[(u64, u64)]>,
    engine: Engine,
    jit_refusal: Option<JitRefusal>,
    ctx_size: usize,
    /// Context bytes the program may touch, as the verifier found.
    ctx_need: usize,
    listing: Vec<Instruction>,
    origin: Vec<usize>,
    /// Whether runs need the per-run state helpers report faults through: interpreter runs of
    /// programs with atomics (whose helpers check addresses there, as rbpf checks every other
    /// access), and runs of programs with `callx`.
    needs_state: bool,
    /// The JIT runs it, and it needs no per-run state.
    fast: bool,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Vm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vm")
            .field("engine", &self.engine)
            .field("jit_refusal", &self.jit_refusal)
            .field("slots", &self.origin.len())
            .finish_non_exhaustive()
    }
}

/// rbpf's JIT writes its code into one 4 KiB page and panics past its end.
const JIT_PAGE: usize = 4096;

impl Vm {
    /// Loads `verified` for the JIT where it applies, else for the interpreter, with a new,
    /// empty map in process memory for each entry of its map table ([`Vm::maps`]).
    pub fn new(verified: &Verified) -> Result<Vm, LoadError> {
        Vm::with_engine(verified, EngineChoice::Auto)
    }

    /// Loads `verified` for the engine chosen, with new maps.
    pub fn with_engine(verified: &Verified, choice: EngineChoice) -> Result<Vm, LoadError> {
        let maps = verified
            .program()
            .maps()
            .iter()
            .enumerate()
            .map(|(index, def)| new_map(def).map_err(|e| map_error(index, def, e)))
            .collect::<Result<Vec<_>, _>>()?;
        Vm::with_maps(verified, &maps, choice)
    }

    /// Loads `verified` for the engine chosen, binding entry `n` of its map table to `maps[n]`:
    /// maps shared with host code, other VMs (one per thread), the GPU or other processes.
    /// Each map must be of the entry's kind, key size and value (record) size.
    ///
    /// ```
    /// use egpu_ebpf::verifier::verify;
    /// use egpu_ebpf::{AttachPoint, MapDef, MapKind, Program, assemble};
    /// use egpu_maps::HashMap;
    /// use egpu_vm::{EngineChoice, Vm};
    ///
    /// static COUNTS: HashMap<u32, u64> = HashMap::with_capacity(64);
    ///
    /// // counts[ctx.word0] += 1
    /// let program = Program::new(
    ///     assemble(
    ///         "ldxw %r2, [%r1+0]
    ///          stxw [%r10-4], %r2
    ///          lddw %r1, map[0]
    ///          mov %r2, %r10
    ///          add %r2, -4
    ///          call 1
    ///          jeq %r0, 0, +2
    ///          mov %r1, 1
    ///          lock add [%r0+0], %r1
    ///          mov %r0, 0
    ///          exit",
    ///     )?,
    ///     vec![MapDef {
    ///         name: "counts".into(),
    ///         kind: MapKind::Hash,
    ///         key_size: 4,
    ///         value_size: 8,
    ///         capacity: 64,
    ///     }],
    ///     AttachPoint::User { ctx_size: 4 },
    /// )?;
    /// let mut vm = Vm::with_maps(&verify(&program)?, &[COUNTS.raw().clone()], EngineChoice::Auto)?;
    /// COUNTS.insert(&7, &40)?;
    /// vm.run(&mut 7u32.to_le_bytes())?;
    /// vm.run(&mut 7u32.to_le_bytes())?;
    /// assert_eq!(COUNTS.get(&7), Some(42));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_maps(
        verified: &Verified,
        maps: &[RawMap],
        choice: EngineChoice,
    ) -> Result<Vm, LoadError> {
        // bpf_loop calls are loops of local calls in what engines run.
        let verified = verified.runnable();
        let program = verified.program();
        let defs = program.maps();
        if defs.len() != maps.len() {
            return Err(LoadError::MapCount { expected: defs.len(), given: maps.len() });
        }
        for (index, (def, map)) in defs.iter().zip(maps).enumerate() {
            map.expect(def.kind, def.key_size, def.value_size)
                .map_err(|e| map_error(index, def, e))?;
        }
        Vm::load(program, verified.context_bytes(), maps.into(), choice)
    }

    /// The maps bound to the program, in the order of its map table.
    pub fn maps(&self) -> &[RawMap] {
        &self.maps
    }

    /// Loads a program the verifier accepted, which may access the first `ctx_need` bytes of
    /// its context. (Unit tests also load unverified programs through here, to reach paths the
    /// verifier closes.)
    fn load(
        program: &Program,
        ctx_need: usize,
        maps: Box<[RawMap]>,
        choice: EngineChoice,
    ) -> Result<Vm, LoadError> {
        let mut stack = vec![0u64; STACK_BYTES / 8 + 1].into_boxed_slice();
        let base = stack.as_mut_ptr() as u64;
        let top = base + STACK_BYTES as u64;
        let map_addrs: Vec<MapAddress> = maps
            .iter()
            .map(|m| {
                let g = m.geometry();
                let first = g.slot_offset(0, 0) as u64 + u64::from(g.value_offset);
                MapAddress {
                    binding: m as *const RawMap as u64,
                    value: m.memory().0.as_ptr() as u64 + first,
                }
            })
            .collect();
        let map_ranges: Box<[(u64, u64)]> = maps
            .iter()
            .map(|m| {
                let (ptr, len) = m.memory();
                (ptr.as_ptr() as u64, ptr.as_ptr() as u64 + len as u64)
            })
            .collect();
        let legal = legalise::legalise(
            program,
            top - SCRATCH_BYTES as u64,
            &helpers::callable(),
            &map_addrs,
        )?;
        let ctx_size = program.attach_point().context_size();

        let (mut engine, mut jit_refusal) = match (choice, jit_verdict(&legal.insns)) {
            (EngineChoice::Interpreter, verdict) => (Engine::Interpreter, verdict.err()),
            (_, Ok(())) => (Engine::Jit, None),
            (EngineChoice::Jit, Err(refusal)) => return Err(refusal.into()),
            (EngineChoice::Auto, Err(refusal)) => (Engine::Interpreter, Some(refusal)),
        };

        let code: Box<[u8]> =
            egpu_ebpf::insn::slots_to_bytes(&egpu_ebpf::instruction::encode(&legal.insns)).into();
        // SAFETY: `code` is owned by the `Vm`, never changed, and dropped after `rbpf` (fields
        // drop in declaration order), so the borrow rbpf keeps stays valid.
        let code_ref: &'static [u8] =
            unsafe { std::slice::from_raw_parts(code.as_ptr(), code.len()) };
        let rbpf_err = |e: std::io::Error| LoadError::Rbpf(e.to_string());
        let mut rbpf = rbpf::EbpfVmRaw::new(None).map_err(rbpf_err)?;
        // egpu has checked and legalised the program; rbpf's own verifier would refuse the
        // legalised code's writes to r10.
        rbpf.set_verifier(|_| Ok(())).map_err(rbpf_err)?;
        // Frames are laid out by the legalised code; rbpf must not move r10 on local calls.
        rbpf.set_stack_usage_calculator(|_, _, _| 0, Box::new(())).map_err(rbpf_err)?;
        rbpf.set_program(code_ref).map_err(rbpf_err)?;
        rbpf.register_allowed_memory(base..top);
        for &(lo, hi) in &map_ranges {
            rbpf.register_allowed_memory(lo..hi);
        }
        let bindings = helpers::bindings();
        let register = |rbpf: &mut rbpf::EbpfVmRaw<'static>, engine: Engine| {
            for b in &bindings {
                let f = if engine == Engine::Jit { b.jit } else { b.interp };
                rbpf.register_helper(b.id, f).map_err(rbpf_err)?;
            }
            Ok::<(), LoadError>(())
        };
        register(&mut rbpf, engine)?;
        if engine == Engine::Jit
            && let Err(refusal) = jit_compile(&mut rbpf)
        {
            if choice == EngineChoice::Jit {
                return Err(refusal.into());
            }
            engine = Engine::Interpreter;
            jit_refusal = Some(refusal);
            register(&mut rbpf, engine)?;
        }
        Ok(Vm {
            rbpf,
            code,
            stack,
            stack_range: (base, top),
            maps,
            map_ranges,
            engine,
            jit_refusal,
            ctx_size,
            ctx_need,
            needs_state: legal.uses_callx
                || legal.uses_internal_helpers && engine == Engine::Interpreter,
            fast: engine == Engine::Jit && !legal.uses_callx,
            listing: legal.insns,
            origin: legal.origin,
            _not_send: PhantomData,
        })
    }

    /// The engine that runs the program.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Bytes at the start of the context the program may read or write, as the verifier found:
    /// fields past them need not be filled.
    pub fn context_needed(&self) -> usize {
        self.ctx_need
    }

    /// Why the JIT does not run the program, when it does not.
    pub fn jit_refusal(&self) -> Option<&JitRefusal> {
        self.jit_refusal.as_ref()
    }

    /// The legalised program rbpf runs, as assembly text (each line ends with the original
    /// instruction it came from).
    pub fn legalised(&self) -> String {
        let mut out = String::new();
        let mut pc = 0;
        for insn in &self.listing {
            out.push_str(&format!("{pc:5}: {insn:<40} # from {}\n", self.origin[pc]));
            pc += insn.slots();
        }
        out
    }

    /// Runs the program with `ctx` as its context (`r1` points at it) and returns `r0`.
    #[inline]
    pub fn run(&mut self, ctx: &mut [u8]) -> Result<u64, RunError> {
        if self.fast && ctx.len() >= self.ctx_need {
            // SAFETY: as in `execute`; `fast` holds only for the JIT.
            let mem: &'static mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(ctx.as_mut_ptr(), ctx.len()) };
            // SAFETY: as in `execute`. rbpf fails only when nothing was compiled, and `fast`
            // implies the program was.
            if let Ok(r0) = unsafe { self.rbpf.execute_program_jit(mem) } {
                return Ok(r0);
            }
        }
        self.run_checked(ctx)
    }

    #[inline(never)]
    fn run_checked(&mut self, ctx: &mut [u8]) -> Result<u64, RunError> {
        if ctx.len() < self.ctx_need {
            return Err(RunError::ContextTooShort { len: ctx.len(), need: self.ctx_need });
        }
        if !self.needs_state {
            return self.execute(ctx);
        }
        let start = ctx.as_mut_ptr() as u64;
        // Moved out for the run, so that `execute` can borrow `self` mutably meanwhile.
        let map_ranges = std::mem::take(&mut self.map_ranges);
        let state = helpers::RunState {
            ctx: (start, start + ctx.len() as u64),
            stack: self.stack_range,
            maps: &map_ranges,
            fault: Cell::new(None),
        };
        let current = helpers::Current::enter(&state);
        let result = self.execute(ctx);
        drop(current);
        let fault = state.fault.get();
        self.map_ranges = map_ranges;
        match fault {
            Some(fault) => Err(RunError::Fault(fault)),
            None => result,
        }
    }

    fn execute(&mut self, ctx: &mut [u8]) -> Result<u64, RunError> {
        // SAFETY: rbpf ties the context's lifetime to the VM's, but keeps no reference to it
        // after the call returns; the slice is live and exclusively ours for the call.
        let mem: &'static mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(ctx.as_mut_ptr(), ctx.len()) };
        let result = match self.engine {
            Engine::Interpreter => self.rbpf.execute_program(mem),
            // SAFETY: the JIT runs only programs the verifier proved to access nothing but their
            // stack frames (inside `self.stack`) and the first `ctx_need` bytes of the context,
            // which `ctx` has; helpers check the addresses they are given.
            Engine::Jit => unsafe { self.rbpf.execute_program_jit(mem) },
        };
        result.map_err(|e| RunError::Interpreter(e.to_string()))
    }

    /// Runs the program with a typed context, which must be the size its attach point takes.
    #[inline]
    pub fn run_ctx<C: Pod>(&mut self, ctx: &mut C) -> Result<u64, RunError> {
        if size_of::<C>() != self.ctx_size {
            return Err(RunError::ContextSize { len: size_of::<C>(), expected: self.ctx_size });
        }
        self.run(bytemuck::bytes_of_mut(ctx))
    }
}

/// A new, empty map in process memory for an entry of a program's map table: per-CPU maps get
/// one shard per logical CPU.
fn new_map(def: &MapDef) -> Result<RawMap, egpu_maps::MapError> {
    let cpu_shards = match def.kind {
        MapKind::PerCpuArray | MapKind::PerCpuHash => egpu_maps::cpu_count(),
        _ => 1,
    };
    let geometry =
        Geometry::new(def.kind, def.key_size, def.value_size, def.capacity, cpu_shards, 0)?;
    RawMap::create(geometry, &Placement::Process)
}

fn map_error(index: usize, def: &MapDef, e: egpu_maps::MapError) -> LoadError {
    LoadError::Map { index, name: def.name.clone(), reason: e.to_string() }
}

/// JIT-compiles, turning rbpf's errors, and any panic it might still raise, into a refusal.
fn jit_compile(rbpf: &mut rbpf::EbpfVmRaw<'static>) -> Result<(), JitRefusal> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rbpf.jit_compile())) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(JitRefusal::Compiler(e.to_string())),
        Err(_) => Err(JitRefusal::Compiler("rbpf's JIT panicked".into())),
    }
}

/// Decides whether the JIT may run a verified program, legalised into `legal`.
fn jit_verdict(legal: &[Instruction]) -> Result<(), JitRefusal> {
    if !cfg!(target_arch = "x86_64") {
        return Err(JitRefusal::UnsupportedArch);
    }
    let estimate = jit_code_bound(legal);
    if estimate > JIT_PAGE {
        return Err(JitRefusal::CodeTooLarge { estimate, limit: JIT_PAGE });
    }
    Ok(())
}

/// An upper bound of the bytes rbpf's x86-64 JIT emits for `insns`: the longest encoding its
/// emitter produces for each instruction (REX prefixes, 32-bit displacements and immediates).
/// `the_code_bound_keeps_every_instruction_inside_the_jit_page` fills the page with each kind.
pub(crate) fn jit_code_bound(insns: &[Instruction]) -> usize {
    use egpu_ebpf::{AluOp as A, CallTarget, Operand as O};
    // Prologue: 5 pushes, 3 moves, the stack allocation, the landing call and jump; epilogue:
    // the stack release, 5 pops and `ret` (50 bytes).
    const FRAME: usize = 64;
    FRAME
        + insns
            .iter()
            .map(|insn| match insn {
                // Saves and restores rax and rdx around `div`, with the divide-by-zero branch.
                Instruction::Alu { op: A::Mul | A::Div | A::Mod | A::SDiv | A::SMod, .. } => 64,
                // `mov rcx, src` and the shift by `cl`.
                Instruction::Alu { op: A::Lsh | A::Rsh | A::Arsh, src: O::Reg(_), .. } => 6,
                Instruction::Alu { src: O::Imm(_), .. } => 7,
                Instruction::Alu { src: O::Reg(_), .. } | Instruction::Neg { .. } => 3,
                // `rol` by 8 of the low word and the mask.
                Instruction::Endian { .. } => 12,
                Instruction::LoadImm64 { .. } => 10,
                Instruction::Load { .. } => 8,
                Instruction::Store { src: O::Imm(_), .. } => 12,
                Instruction::Store { src: O::Reg(_), .. } => 8,
                Instruction::Jump { .. } => 5,
                Instruction::Branch { .. } => 13,
                // Four pushes, `call`, four pops.
                Instruction::Call(CallTarget::Local(_)) => 19,
                // `mov rcx, r9`, `movabs rax, helper`, `call rax`.
                Instruction::Call(_) => 15,
                Instruction::Exit => 1,
                // Legalised away before rbpf sees the program.
                Instruction::Atomic { .. } => 64,
            })
            .sum::<usize>()
}

#[cfg(test)]
mod tests;
