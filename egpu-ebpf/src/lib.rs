//! The eBPF core of egpu.
//!
//! Everything in egpu runs eBPF, and this crate is what every part of egpu agrees on:
//!
//! | module | what it defines |
//! |---|---|
//! | [`insn`] | the wire form: 8-byte slots, registers, opcode fields |
//! | [`instruction`] | the typed form, with a decoder that refuses every non-canonical encoding |
//! | [`program`] | the program type (instructions, map table, attach point) and its structural checks |
//! | [`helpers`] | the numbered helper table, with each helper's CPU and GPU semantics |
//! | [`context`] | the attach points and the `#[repr(C)]` context each passes in `r1` |
//! | [`fields`] | the contexts' field table (names, types, offsets, sizes, docs), from the structs |
//! | [`map`] | map declarations, the entries of a program's map table |
//! | [`verifier`] | the safety check every program passes before any engine runs it |
//! | [`asm`], [`disasm`] | the assembler and disassembler for bpf_conformance's text syntax |
//! | [`conformance`] | reading the bpf_conformance suite that every engine is measured by |
//!
//! It sits below both the CPU VM (in `egpu`) and the GPU translation (in `egpu-device`), so both
//! consume one definition of the instruction set, helpers and contexts, without a dependency
//! between them.
//!
//! ```
//! use egpu_ebpf::{AttachPoint, Program, assemble};
//!
//! let slots = assemble("mov %r0, 42\nexit")?;
//! let program = Program::new(slots, vec![], AttachPoint::User { ctx_size: 0 })?;
//! assert_eq!(program.disassemble(), "    mov %r0, 42\n    exit\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod asm;
pub mod c_header;
pub mod conformance;
pub mod context;
pub mod disasm;
mod error;
pub mod fields;
pub mod helpers;
pub mod insn;
pub mod instruction;
pub mod map;
pub mod program;
pub mod verifier;

pub use asm::assemble;
pub use c_header::c_header;
pub use context::{
    AllocCtx, AttachPoint, CONTEXT_REVISION, DeviceEvent, HostEvent, KernelCtx, LaunchCtx,
    MemAccessCtx, MemcpyCtx, ModuleLoadCtx, ParseAttachError, Phase, SyncCtx, context_tag,
    kernel_id,
};
pub use disasm::disassemble;
pub use error::{AsmError, DecodeError, ProgramError};
pub use fields::{ContextType, Field};
pub use insn::{Insn, Reg};
pub use instruction::{
    AluOp, AtomicOp, ByteOrder, CallTarget, Decoded, Imm64, Instruction, JmpCond, Operand, Size,
    Width, decode,
};
pub use map::{MapDef, MapKind, ParseMapDefError};
pub use program::{Function, Program};
