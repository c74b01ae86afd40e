//! Probe Rust's back end: the probe IR and its code generator.
//!
//! `#[egpu::probe]` turns a Rust function into code that builds a
//! [`ProbeIr`](ir::ProbeIr) when the probe is first used, with every size and offset resolved by
//! rustc; [`compile`] turns the IR into an eBPF [`Program`](egpu_ebpf::Program), which the
//! verifier then checks like any other. The IR is public so that other tools can generate probes
//! without going through eBPF assembly.
//!
//! ```
//! use egpu_ebpf::AttachPoint;
//! use egpu_ebpf::verifier::verify;
//! use egpu_probe::compile;
//! use egpu_probe::ir::{BinOp, Expr, Place, ProbeIr, Stmt, Ty};
//! use egpu_vm::Vm;
//!
//! // return ctx.a * 3 + 1, with `a` a u32 at offset 4 of an 8-byte context
//! let load = Expr::Load(Ty::U32, Place::Ctx(4));
//! let times3 = Expr::Binary(BinOp::Mul, Ty::U32, Box::new(load), Box::new(Expr::Const(Ty::U32, 3)));
//! let plus1 = Expr::Binary(BinOp::Add, Ty::U32, Box::new(times3), Box::new(Expr::Const(Ty::U32, 1)));
//! let ir = ProbeIr {
//!     attach: AttachPoint::User { ctx_size: 8 },
//!     vars: vec![],
//!     bufs: vec![],
//!     ptrs: 0,
//!     maps: vec![],
//!     body: vec![Stmt::Return(plus1)],
//! };
//! let program = compile(&ir)?;
//! let mut vm = Vm::new(&verify(&program)?)?;
//! let mut ctx = [0u8, 0, 0, 0, 14, 0, 0, 0];
//! assert_eq!(vm.run(&mut ctx)?, 43);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

#[doc(hidden)]
pub mod build;
mod codegen;
pub mod ir;
pub mod print;
mod source;
#[doc(hidden)]
pub mod twin;

pub use build::{BuildError, Probe, ProbeError};
pub use codegen::{CompileError, compile, compile_mapped};
pub use print::prints;
pub use source::{Refusal, SourceMap};

#[cfg(test)]
mod loop_tests;
#[cfg(test)]
mod tests;
