//! The emitter: the PTX of one eBPF function, written instruction by instruction.
//!
//! [`Emitter::function`] opens the function (the main function as a `{ … }` block, a local one
//! as a `.func` taking `r1`–`r5` and returning `r0`), writes its prologue (the registers of
//! [`regs`](super::regs), the frame of [`frame`](super::frame), then the context's address or
//! the arguments into `r1`…), then every instruction, with a label where a jump lands.
//! [`Emitter::instruction`] hands each instruction to the file of its class.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{Instruction, Program, Reg, Width};

use super::frame::stack_in_registers;
use super::{Context, Options, TranslateError};

/// Writes the PTX of one eBPF function.
pub(super) struct Emitter<'a> {
    pub(super) verified: &'a Verified,
    pub(super) program: &'a Program,
    pub(super) options: &'a Options,
    /// The function's index among the program's functions (0: the main function).
    pub(super) function: usize,
    /// The PTX written so far.
    pub(super) out: String,
    /// Bytes of the frame (0: no stack).
    pub(super) frame: u32,
    /// Whether the frame is kept in registers, one 64-bit register per 8-byte slot, rather than
    /// in a `.local` array (see [`stack_in_registers`]).
    pub(super) in_registers: bool,
    /// 64-bit registers `k0`, `k1`, … that map helpers use for keys and values.
    pub(super) words: u32,
    /// The module-level functions shared by translations ([`Translation::shared`]) that this
    /// function calls, by name.
    ///
    /// [`Translation::shared`]: super::Translation::shared
    pub(super) shared: BTreeMap<String, String>,
    /// Labels to place after the code of the instruction at a pc (where a lookup's cache hit,
    /// which cannot be null, goes on past the null check that follows the lookup).
    pub(super) after: BTreeMap<usize, String>,
    /// Whether a miss was deferred ([`Options::defer`](super::Options::defer)).
    pub(super) deferred: bool,
    /// The instructions a deferred miss leaves no path to (`defer.rs`): not translated.
    pub(super) away: BTreeSet<usize>,
}

impl<'a> Emitter<'a> {
    pub(super) fn new(
        verified: &'a Verified,
        options: &'a Options,
        function: usize,
    ) -> Emitter<'a> {
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
            shared: BTreeMap::new(),
            after: BTreeMap::new(),
            deferred: false,
            away: BTreeSet::new(),
        }
    }

    /// Writes one line of code.
    pub(super) fn line(&mut self, text: impl AsRef<str>) {
        self.out.push('\t');
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// Places `label` here.
    pub(super) fn place(&mut self, label: &str) {
        self.out.push_str(label);
        self.out.push_str(":\n");
    }

    /// Writes the whole function (see the module docs).
    pub(super) fn function(&mut self) -> Result<(), TranslateError> {
        let f = &self.program.functions()[self.function];
        let (start, end) = (f.start, f.end);
        let main = self.function == 0;
        if main {
            self.out.push_str("\t{\n");
        } else {
            let mut params: Vec<String> =
                (1..=5).map(|i| format!(".reg .b64 {}", self.param(i))).collect();
            if let Context::Access { size_reg, .. } = &self.options.context {
                params.push(format!(".reg .b64 {}", self.context_param()));
                if size_reg.is_some() {
                    params.push(format!(".reg .b32 {}", self.size_param()));
                }
            }
            let (ret, name) = (self.ret_param(), self.func_name(self.function));
            writeln!(self.out, ".func (.reg .b64 {ret}) {name}({})\n{{", params.join(", "))
                .expect("writing to a String");
        }
        let words_at = self.declare_registers();
        self.frame_prologue();
        if main {
            if let Context::Memory(addr) = &self.options.context {
                let r1 = self.reg(Reg::R1);
                self.line(format!("mov.b64 {r1}, {addr};"));
            }
        } else {
            for i in 1..=5u8 {
                let (r, param) = (self.reg(Reg::new(i).expect("r1-r5")), self.param(i));
                self.line(format!("mov.b64 {r}, {param};"));
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
        // An instruction no path reaches is left out (the verifier learned nothing about it to
        // translate it by: a frame slot it stores to, a map it passes); a run of them starts
        // with an exit returning 0, which no path reaches either (and which, were the verifier
        // wrong, would end the probe rather than fault the kernel it runs in).
        let mut unreached = false;
        for d in decoded {
            if targets.contains(&d.pc) {
                let label = self.label(d.pc);
                self.place(&label);
            }
            if self.away.contains(&d.pc) {
                // Left behind by a deferred miss.
            } else if self.verified.reached(d.pc) {
                unreached = false;
                self.instruction(d.pc, d.insn)?;
            } else if !unreached {
                unreached = true;
                let r0 = self.reg(Reg::R0);
                self.line(format!("mov.b64 {r0}, 0;"));
                self.exit();
            }
            if let Some(label) = self.after.remove(&d.pc) {
                self.place(&label);
            }
        }
        self.declare_map_words(words_at);
        if main {
            let exit = self.exit_label();
            self.place(&exit);
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

    /// Lowers one instruction, in the file of its class.
    fn instruction(&mut self, pc: usize, insn: Instruction) -> Result<(), TranslateError> {
        match insn {
            Instruction::Alu { op, width: Width::W64, dst, src } => self.alu64(op, dst, src),
            Instruction::Alu { op, width: Width::W32, dst, src } => self.alu32(op, dst, src),
            Instruction::Neg { width, dst } => self.neg(width, dst),
            Instruction::Endian { order, bits, dst } => self.endian(order, bits, dst),
            Instruction::LoadImm64 { dst, imm } => self.load_imm64(pc, dst, imm)?,
            Instruction::Load { size, signed, dst, base, off } => {
                self.load(pc, size, signed, dst, base, off);
            }
            Instruction::Store { size, base, off, src } => self.store(pc, size, base, off, src),
            Instruction::Atomic { op, fetch, size, base, off, src } => {
                self.atomic(pc, op, fetch, size, base, off, src);
            }
            Instruction::Jump { .. } => {
                let target = insn.jump_target(pc).expect("a jump has a target") as usize;
                self.jump(target);
            }
            Instruction::Branch { cond, width, dst, src, .. } => {
                let target = insn.jump_target(pc).expect("a branch has a target") as usize;
                self.branch(cond, width, dst, src, target);
            }
            Instruction::Call(target) => self.call(pc, insn, target)?,
            Instruction::Exit => self.exit(),
        }
        Ok(())
    }
}
