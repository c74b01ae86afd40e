//! Every name the translation declares. Each starts with the translation's
//! [`prefix`](super::Options::prefix), `P` below, so that the code can be spliced into any kernel
//! without touching the kernel's own names; this file is the one place that forms them.
//!
//! | name | declared as | holds |
//! |---|---|---|
//! | `%P_r0` … `%P_r10` | `.reg .b64` | the eBPF registers ([`Emitter::reg`]) |
//! | `%P_t0` … `%P_t7` | `.reg .b64` | 64-bit scratch ([`Emitter::tmp64`]) |
//! | `%P_w0` … `%P_w7` | `.reg .b32` | 32-bit scratch ([`Emitter::tmp32`]) |
//! | `%P_q0` … `%P_q2` | `.reg .pred` | predicates ([`Emitter::pred`]) |
//! | `%P_k0` … | `.reg .b64`, as many as the function uses | the words of a map helper's key and value ([`Emitter::map_word`]) |
//! | `%P_s0` … | `.reg .b64`, one per 8 bytes of frame | the frame, when it lives in registers ([`Emitter::slot_reg`]) |
//! | `%P_stack` | `.local .b8` array | the frame, otherwise ([`Emitter::local_frame`]) |
//! | `%P_a1` … `%P_a5`, `%P_ret` | `.reg .b64` parameters | a local function's arguments and result ([`Emitter::param`], [`Emitter::ret_param`]) |
//! | `P_f1` … | `.func` | the local functions ([`Emitter::func_name`]) |
//! | `$P_L…` | label | a jump target, by the slot it is at ([`Emitter::label`]) |
//! | `$P_exit` | label | the end of the main function ([`Emitter::exit_label`]) |
//! | `$P_A…`, `$P_C…`, `$P_H…`, … | labels | the branches within one instruction's code ([`Emitter::local_label`]) |

use egpu_ebpf::{Operand, Reg};

use super::Context;
use super::emit::Emitter;

/// The 64-bit scratch registers every function declares.
const TMP64: u8 = 8;
/// The 32-bit scratch registers every function declares.
const TMP32: u8 = 8;
/// The predicates every function declares.
const PREDS: u8 = 3;

impl Emitter<'_> {
    /// The prefix that starts every name.
    pub(super) fn prefix(&self) -> &str {
        &self.options.prefix
    }

    /// The register of eBPF register `reg`.
    pub(super) fn reg(&self, reg: Reg) -> String {
        format!("%{}_r{}", self.prefix(), reg.index())
    }

    /// 64-bit scratch register `i`.
    pub(super) fn tmp64(&self, i: u8) -> String {
        debug_assert!(i < TMP64, "64-bit scratch register {i} is not declared");
        format!("%{}_t{i}", self.prefix())
    }

    /// 32-bit scratch register `i`.
    pub(super) fn tmp32(&self, i: u8) -> String {
        debug_assert!(i < TMP32, "32-bit scratch register {i} is not declared");
        format!("%{}_w{i}", self.prefix())
    }

    /// Predicate `i`.
    pub(super) fn pred(&self, i: u8) -> String {
        debug_assert!(i < PREDS, "predicate {i} is not declared");
        format!("%{}_q{i}", self.prefix())
    }

    /// Word `i` of a map helper's key and value; the helper counts it in
    /// [`words`](Emitter::words), which the declaration follows.
    pub(super) fn map_word(&self, i: u32) -> String {
        format!("%{}_k{i}", self.prefix())
    }

    /// The register of the frame's 8-byte slot `i` (from its lowest address), when the frame
    /// lives in registers.
    pub(super) fn slot_reg(&self, i: i64) -> String {
        format!("%{}_s{i}", self.prefix())
    }

    /// The frame's `.local` array, when it does not live in registers.
    pub(super) fn local_frame(&self) -> String {
        format!("%{}_stack", self.prefix())
    }

    /// A local function's parameter that receives `r{i}` (1–5).
    pub(super) fn param(&self, i: u8) -> String {
        format!("%{}_a{i}", self.prefix())
    }

    /// A local function's return parameter, which receives `r0`.
    pub(super) fn ret_param(&self) -> String {
        format!("%{}_ret", self.prefix())
    }

    /// The `.func` of the program's function `f`.
    pub(super) fn func_name(&self, f: usize) -> String {
        format!("{}_f{f}", self.prefix())
    }

    /// The label of the instruction at `pc`, a jump target.
    pub(super) fn label(&self, pc: usize) -> String {
        format!("${}_L{pc}", self.prefix())
    }

    /// The label at the end of the main function, where `exit` goes.
    pub(super) fn exit_label(&self) -> String {
        format!("${}_exit", self.prefix())
    }

    /// A label within the code of the instruction at `pc`, by `kind`: `A` and `B` an atomic
    /// whose region (the stack or not) is decided at run time, `C` and `F` an add combined per
    /// thread (`F`: the flush of the previous sum), `W` an add aggregated across a warp, `U` an
    /// array update, `H` a hash map helper, `R` a ring record. Labels of parts of that code add
    /// `_` and a word (`$P_H12_done`).
    pub(super) fn local_label(&self, kind: char, pc: usize) -> String {
        format!("${}_{kind}{pc}", self.prefix())
    }

    /// Where this thread's SM id is: the kernel's register (in the main function, which is
    /// inlined into the kernel), or `%smid`.
    pub(super) fn smid(&self) -> String {
        match &self.options.smid {
            Some(reg) if self.function == 0 => reg.clone(),
            _ => "%smid".to_owned(),
        }
    }

    /// The context as this function sees it: a local function (a `.func`, which cannot name
    /// the kernel's registers) receives the address of a memory access in a parameter of its
    /// own, which [`Emitter::context_param`] names.
    pub(super) fn context(&self) -> Context {
        match &self.options.context {
            Context::Access {
                kernel_id, size, size_reg, site, is_store, class, op, fetch, ..
            } if self.function != 0 => Context::Access {
                kernel_id: *kernel_id,
                addr: self.context_param(),
                size: *size,
                size_reg: size_reg.as_ref().map(|_| self.size_param()),
                site: *site,
                is_store: *is_store,
                class: *class,
                op: *op,
                fetch: *fetch,
            },
            other => other.clone(),
        }
    }

    /// A local function's parameter that receives the address of a memory access context.
    pub(super) fn context_param(&self) -> String {
        format!("%{}_cx", self.prefix())
    }

    /// A local function's parameter that receives the size of a memory access context, when
    /// it is known at run time only.
    pub(super) fn size_param(&self) -> String {
        format!("%{}_cs", self.prefix())
    }

    /// The second operand as a PTX operand of a 64-bit operation (immediates sign-extended).
    pub(super) fn operand64(&self, src: Operand) -> String {
        match src {
            Operand::Reg(r) => self.reg(r),
            Operand::Imm(i) => (i as i64).to_string(),
        }
    }

    /// Declares the registers and predicates every function has, and returns where the map
    /// words' declaration goes once their number is known ([`Emitter::declare_map_words`]).
    pub(super) fn declare_registers(&mut self) -> usize {
        let p = self.prefix().to_owned();
        self.line(format!(".reg .b64 %{p}_r<11>;"));
        self.line(format!(".reg .b64 %{p}_t<{TMP64}>;"));
        self.line(format!(".reg .b32 %{p}_w<{TMP32}>;"));
        let words_at = self.out.len();
        self.line(format!(".reg .pred %{p}_q<{PREDS}>;"));
        words_at
    }

    /// Declares the map words the function used, at `at` (from [`Emitter::declare_registers`]).
    pub(super) fn declare_map_words(&mut self, at: usize) {
        if self.words > 0 {
            let declaration = format!("\t.reg .b64 %{}_k<{}>;\n", self.prefix(), self.words);
            self.out.insert_str(at, &declaration);
        }
    }

    /// Declares `n` frame slot registers.
    pub(super) fn declare_slots(&mut self, n: u32) {
        let p = self.prefix().to_owned();
        self.line(format!(".reg .b64 %{p}_s<{n}>;"));
    }
}
