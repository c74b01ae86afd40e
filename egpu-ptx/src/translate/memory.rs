//! Loads and stores. An access to a frame that lives in registers reads or writes its slot's
//! bits; one the verifier proved naturally aligned is a `ld`/`st` (`.local` for the own frame at
//! a constant offset, `.global` for map values, generic otherwise); any other goes byte by byte,
//! since the GPU faults on misaligned accesses. A load from a device context at a constant
//! offset reads the special register or site value that holds the field.

use std::mem::offset_of;

use egpu_ebpf::verifier::{Access, AccessRegion};
use egpu_ebpf::{KernelCtx, MemAccessCtx, Operand, Reg, Size};

use super::Context;
use super::emit::Emitter;

/// The bits of an access of `size`.
pub(super) const fn ptx_bits(size: Size) -> u32 {
    size.bytes() * 8
}

/// Where a word of a device context comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    /// A value known when translating (kernel id, access size and site, …; 0 for padding).
    Const(u32),
    /// A special register (`%tid.x`, `%smid`, …).
    Special(&'static str),
    /// The register holding an access's size, known at run time.
    SizeReg,
    /// The low half of the address accessed.
    AddrLo,
    /// Its high half.
    AddrHi,
    /// The warp's index in its block, computed from the thread's.
    Warp,
    /// A half of `%gridid` (the launch's id): the high one when `true`.
    Grid(bool),
    /// A half of the launch's tag id ([`Options::tag`](super::Options::tag)): the high one
    /// when `true`.
    Tag(bool),
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
                o if o == offset_of!(C, launch_id) => Word::Grid(false),
                o if o == offset_of!(C, launch_id) + 4 => Word::Grid(true),
                o if o == offset_of!(C, tag_id) => Word::Tag(false),
                o if o == offset_of!(C, tag_id) + 4 => Word::Tag(true),
                o => dims(o, offset_of!(C, thread), TID)
                    .or_else(|| dims(o, offset_of!(C, block), CTAID))
                    .or_else(|| dims(o, offset_of!(C, block_dim), NTID))
                    .or_else(|| dims(o, offset_of!(C, grid_dim), NCTAID))
                    .unwrap_or(Word::Const(0)),
            }
        }
        Context::Access {
            kernel_id, size, ref size_reg, site, is_store, class, op, fetch, ..
        } => {
            type C = MemAccessCtx;
            match offset {
                o if o == offset_of!(C, addr) => Word::AddrLo,
                o if o == offset_of!(C, addr) + 4 => Word::AddrHi,
                o if o == offset_of!(C, kernel_id) => half(kernel_id, 0),
                o if o == offset_of!(C, kernel_id) + 4 => half(kernel_id, 4),
                o if o == offset_of!(C, size) && size_reg.is_some() => Word::SizeReg,
                o if o == offset_of!(C, size) => Word::Const(size),
                o if o == offset_of!(C, class) => Word::Const(class),
                o if o == offset_of!(C, op) => Word::Const(op),
                o if o == offset_of!(C, fetch) => Word::Const(u32::from(fetch)),
                o if o == offset_of!(C, site) => Word::Const(site),
                o if o == offset_of!(C, warp) => Word::Warp,
                o if o == offset_of!(C, lane) => Word::Special("%laneid"),
                o if o == offset_of!(C, sm) => Word::Special("%smid"),
                o if o == offset_of!(C, is_store) => Word::Const(u32::from(is_store)),
                o if o == offset_of!(C, launch_id) => Word::Grid(false),
                o if o == offset_of!(C, launch_id) + 4 => Word::Grid(true),
                o if o == offset_of!(C, tag_id) => Word::Tag(false),
                o if o == offset_of!(C, tag_id) + 4 => Word::Tag(true),
                o => dims(o, offset_of!(C, thread), TID)
                    .or_else(|| dims(o, offset_of!(C, block), CTAID))
                    .unwrap_or(Word::Const(0)),
            }
        }
        Context::Memory(_) => Word::Const(0),
    }
}

impl Emitter<'_> {
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

    /// `dst = *(base + off)`, of `size` bytes, zero- or sign-extended.
    pub(super) fn load(
        &mut self,
        pc: usize,
        size: Size,
        signed: bool,
        dst: Reg,
        base: Reg,
        off: i16,
    ) {
        let d = self.reg(dst);
        let bits = ptx_bits(size);
        if let (Context::Kernel { .. } | Context::Access { .. }, Some(a)) =
            (&self.options.context, self.verified.access(pc))
            && let (AccessRegion::Context, Some(o)) = (a.region, a.offset)
        {
            self.context_load(o as usize, size, signed, &d);
            return;
        }
        if let Some((word, byte)) = self.invariant_word(pc, size) {
            match (size, signed) {
                (Size::DW, _) => self.line(format!("mov.b64 {d}, {word};")),
                (_, false) => self.line(format!("bfe.u64 {d}, {word}, {}, {bits};", byte * 8)),
                (_, true) => self.line(format!("bfe.s64 {d}, {word}, {}, {bits};", byte * 8)),
            }
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
        let (addr, mut space, aligned) = self.address(pc, base, off);
        if let Some(Access { region: AccessRegion::MapValue(m), .. }) = self.verified.access(pc)
            && space == ".global"
            && super::atomic::writes_values(self.verified, m)
        {
            space = ".relaxed.gpu.global";
        }
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

    /// The kernel's register that holds the word a load at `pc` of `size` reads, and the byte
    /// of the word it starts at, when the word stays the same while the kernel runs
    /// ([`Options::invariants`](super::Options::invariants)).
    fn invariant_word(&self, pc: usize, size: Size) -> Option<(String, u32)> {
        let a = self.verified.access(pc)?;
        let (AccessRegion::MapValue(m), Some(o)) = (a.region, a.offset) else { return None };
        let o = u32::try_from(o).ok()?;
        let byte = o % 8;
        if byte + size.bytes() > 8 || byte % size.bytes() != 0 {
            return None;
        }
        let (_, _, register) =
            self.options.invariants.iter().find(|(map, at, _)| *map == m && *at == o - byte)?;
        Some((register.clone(), byte))
    }

    /// A load from a device context: the value comes from the words that hold the field.
    fn context_load(&mut self, offset: usize, size: Size, signed: bool, d: &str) {
        let context = self.context();
        let [w0, w1] = [self.tmp32(0), self.tmp32(1)];
        if size == Size::DW {
            if let Context::Access { addr, .. } = &context
                && offset == offset_of!(MemAccessCtx, addr)
            {
                self.line(format!("mov.b64 {d}, {addr};"));
                return;
            }
            if context_word(&context, offset) == Word::Grid(false) {
                self.line(format!("mov.u64 {d}, %gridid;"));
                return;
            }
            if context_word(&context, offset) == Word::Tag(false) {
                let tag = self.options.tag.clone().unwrap_or_else(|| "0".to_owned());
                self.line(format!("mov.b64 {d}, {tag};"));
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

    /// Reads the device context's 4-byte word at `offset` into the 32-bit register `into`.
    fn read_context_word(&mut self, context: &Context, offset: usize, into: &str) {
        match context_word(context, offset) {
            Word::Const(v) => self.line(format!("mov.b32 {into}, {v};")),
            Word::Special(reg) => {
                let reg = if reg == "%smid" { self.smid() } else { reg.to_owned() };
                self.line(format!("mov.u32 {into}, {reg};"));
            }
            Word::SizeReg => {
                let Context::Access { size_reg: Some(reg), .. } = context else {
                    unreachable!("a size register")
                };
                self.line(format!("mov.u32 {into}, {reg};"));
            }
            word @ (Word::AddrLo | Word::AddrHi) => {
                let Context::Access { addr, .. } = context else { unreachable!("access words") };
                let t0 = self.tmp64(0);
                let shift = if word == Word::AddrHi { 32 } else { 0 };
                self.line(format!("shr.u64 {t0}, {addr}, {shift};"));
                self.line(format!("cvt.u32.u64 {into}, {t0};"));
            }
            Word::Grid(high) => {
                let t0 = self.tmp64(0);
                self.line(format!("mov.u64 {t0}, %gridid;"));
                if high {
                    self.line(format!("shr.u64 {t0}, {t0}, 32;"));
                }
                self.line(format!("cvt.u32.u64 {into}, {t0};"));
            }
            Word::Tag(high) => match self.options.tag.clone() {
                Some(tag) => {
                    let t0 = self.tmp64(0);
                    self.line(format!("shr.u64 {t0}, {tag}, {};", if high { 32 } else { 0 }));
                    self.line(format!("cvt.u32.u64 {into}, {t0};"));
                }
                None => self.line(format!("mov.b32 {into}, 0;")),
            },
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

    /// `*(base + off) = src`, its low `size` bytes.
    pub(super) fn store(&mut self, pc: usize, size: Size, base: Reg, off: i16, src: Operand) {
        let value = match src {
            Operand::Reg(r) => self.reg(r),
            Operand::Imm(i) => {
                let t3 = self.tmp64(3);
                self.line(format!("mov.b64 {t3}, {};", i as i64));
                t3
            }
        };
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
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, KernelCtx, MemAccessCtx, Program, assemble};

    use super::super::{Context, Options, translate};

    /// A probe that reads the 8-byte field at `offset` of `event`'s context whole and its
    /// upper half, translated with `tag` as the kernel's tag register.
    fn reading(event: DeviceEvent, offset: usize, tag: Option<&str>) -> String {
        let context = match event {
            DeviceEvent::KernelEntry => Context::Kernel { kernel_id: 7 },
            _ => Context::load_store(7, "%rd9".into(), 4, 0, false),
        };
        let text = format!(
            "ldxdw %r6, [%r1+{offset}]\nldxw %r7, [%r1+{}]\nadd %r6, %r7\nmov %r0, %r6\nexit",
            offset + 4
        );
        let slots = assemble(&text).expect("assembles");
        let program = Program::new(slots, vec![], AttachPoint::Device(event)).expect("program");
        let verified = verify(&program).expect("verified");
        let mut options = Options::new("t", context);
        options.tag = tag.map(str::to_owned);
        translate(&verified, &options).expect("translated").body
    }

    /// The launch's id is `%gridid`, read whole or by halves, in both device contexts.
    #[test]
    fn launch_id_reads_the_grid_id() {
        let at = [offset_of!(KernelCtx, launch_id), offset_of!(MemAccessCtx, launch_id)];
        for (event, offset) in [(DeviceEvent::KernelEntry, at[0]), (DeviceEvent::GlobalLoad, at[1])]
        {
            let body = reading(event, offset, None);
            assert!(body.contains("mov.u64 %"), "{body}");
            assert_eq!(body.matches("%gridid").count(), 2, "{body}");
            assert!(body.contains("shr.u64") && body.contains(", 32;"), "{body}");
        }
    }

    /// The launch's tag id is the kernel's register that holds it, read whole or by halves,
    /// in both device contexts; 0 without one (a device function).
    #[test]
    fn tag_id_reads_the_kernel_s_register() {
        let at = [offset_of!(KernelCtx, tag_id), offset_of!(MemAccessCtx, tag_id)];
        for (event, offset) in [(DeviceEvent::KernelEntry, at[0]), (DeviceEvent::GlobalLoad, at[1])]
        {
            let body = reading(event, offset, None);
            assert!(body.contains("mov.b64 %") && body.contains(", 0;"), "{body}");
            assert!(!body.contains("%egpu_tag"), "{body}");
            let body = reading(event, offset, Some("%egpu_tag"));
            assert_eq!(body.matches("%egpu_tag").count(), 2, "{body}");
            assert!(body.contains("shr.u64") && body.contains("%egpu_tag, 32;"), "{body}");
        }
    }
}
