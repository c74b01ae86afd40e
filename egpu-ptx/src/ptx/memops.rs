//! Which PTX instructions touch global memory: a table written from the PTX ISA (9.0), by opcode
//! and state space, kept apart from the injector so that the injector can be checked against it.
//!
//! [`global_access`] says, for one instruction, whether it may read or write global memory, in
//! which [`MemClass`], through which operand, and how many bytes. It answers from the ISA alone:
//! whether egpu observes the instruction is the injector's business, and a module's *global
//! memory instructions* (M in `egpu inject`'s `observed N of M`) are those it returns
//! [`Touch::Data`] for.
//!
//! | PTX | class | global memory |
//! |---|---|---|
//! | `ld`, `ld.global.nc`, `ldu` | [`MemClass::LoadStore`] | read, `.global` or generic |
//! | `st` | [`MemClass::LoadStore`] | written, `.global` or generic |
//! | `atom`, `red` | [`MemClass::Atomic`] | read and written, `.global` or generic |
//! | `cp.async.{ca,cg}.shared.global` | [`MemClass::AsyncCopy`] | read (the source) |
//! | `cp.async.bulk` with `.global` | [`MemClass::BulkCopy`] | read (`.shared::*.global`) or written (`.global.shared::cta`) |
//! | `cp.reduce.async.bulk.global` | [`MemClass::BulkCopy`] | read and written (the destination) |
//! | `cp.async.bulk.tensor`, `cp.reduce.async.bulk.tensor` with `.global` | [`MemClass::TensorCopy`] | read or written, through a tensor map |
//! | `tex`, `tld4` | [`MemClass::Texture`] | read, through a texture |
//! | `suld`, `sust`, `sured` | [`MemClass::Surface`] | read, written, both |
//! | `multimem.ld_reduce`, `.st`, `.red` | [`MemClass::Multimem`] | read, written, both (on several GPUs) |
//! | `wmma.load`, `wmma.store` (`.global` or generic) | [`MemClass::Matrix`] | read, written (a warp's fragment) |
//! | `tensormap.replace.global`, `tensormap.cp_fenceproxy` | [`MemClass::TensorMap`] | written (a field of a tensor map, or the whole 128-byte map) |
//! | `prefetch`, `prefetchu`, `cp.async.bulk.prefetch`, `applypriority`, `discard` | hints ([`Touch::Hint`]) | no data moves |
//! | anything else with a memory operand not in `.shared`, `.local`, `.param` or `.const` | [`MemClass::Unknown`] | may be |
//!
//! The shared, local, parameter and constant state spaces are not global memory, nor are
//! `mbarrier`, `ldmatrix`, `stmatrix`, `st.async`, `red.async` and `cp.async.bulk` between
//! shared memories (they name shared memory only). Generic addresses (no state space) may be
//! global at run time, so generic `ld`, `st`, `ldu`, `atom`, `red` and `wmma` count.

use super::PtxInstruction;

/// The class of an instruction that touches global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MemClass {
    /// `ld`, `st`, `ldu`.
    LoadStore,
    /// `atom`, `red`.
    Atomic,
    /// `cp.async` (global to shared memory, per thread).
    AsyncCopy,
    /// `cp.async.bulk` and `cp.reduce.async.bulk` between global and shared memory.
    BulkCopy,
    /// `cp.async.bulk.tensor` and `cp.reduce.async.bulk.tensor` (the tensor memory accelerator).
    TensorCopy,
    /// Texture fetches.
    Texture,
    /// Surface loads, stores and reductions.
    Surface,
    /// Multimem accesses (memory on several GPUs, through one address).
    Multimem,
    /// Warp matrix loads and stores (`wmma`).
    Matrix,
    /// Writes of tensor maps in global memory.
    TensorMap,
    /// An opcode this table does not know, with an operand in memory that may be global.
    Unknown,
}

impl MemClass {
    /// The class's name, as `egpu inject` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            MemClass::LoadStore => "load/store",
            MemClass::Atomic => "atomic",
            MemClass::AsyncCopy => "async copy",
            MemClass::BulkCopy => "bulk copy",
            MemClass::TensorCopy => "tensor copy",
            MemClass::Texture => "texture",
            MemClass::Surface => "surface",
            MemClass::Multimem => "multimem",
            MemClass::Matrix => "matrix",
            MemClass::TensorMap => "tensor map",
            MemClass::Unknown => "unknown",
        }
    }
}

/// How many bytes an access moves, by the instruction's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bytes {
    /// The opcode's type times its vector width (`ld.global.v4.f32`: 16).
    Typed(u32),
    /// The value of operand `n` (a constant or a register), e.g. a bulk copy's size.
    Operand(usize),
    /// `cp.async`: `cp_size` (operand 2), or the `src_size` operand 3 when there is one (bytes
    /// read; the rest of the destination is filled with zeros), or 0 when the instruction's
    /// last operand, an `ignore-src` predicate, holds.
    AsyncCopy,
    /// Not in the instruction: a tensor copy's box, a texture's element, a fragment.
    Unknown,
}

/// What an instruction may do to global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GlobalAccess {
    /// Its class.
    pub class: MemClass,
    /// Whether it reads global memory.
    pub reads: bool,
    /// Whether it writes global memory.
    pub writes: bool,
    /// Whether the address is generic (global only at run time, perhaps).
    pub generic: bool,
    /// The operand holding the global address: `[%rd1+8]`, or for a tensor copy
    /// `[tensor_map, {coordinates}]`.
    pub operand: usize,
    /// The bytes it moves.
    pub bytes: Bytes,
}

/// What an instruction does to global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Touch {
    /// Reads or writes data there.
    Data(GlobalAccess),
    /// A hint about memory that moves no data for the program (`prefetch`, `discard`,
    /// `applypriority`): not a global memory instruction.
    Hint,
}

/// State spaces that are not global memory.
pub(crate) fn other_space(q: &str) -> bool {
    matches!(q, "shared" | "local" | "param" | "const" | "tex")
        || q.starts_with("shared::")
        || q.starts_with("param::")
}

/// Whether the instruction has an operand in memory (`[...]`).
fn has_memory_operand(insn: &PtxInstruction<'_>) -> bool {
    insn.operands.iter().any(|o| o.starts_with('['))
}

/// The bytes of one element of the opcode's type, times its vector width.
fn typed_bytes(insn: &PtxInstruction<'_>) -> Option<u32> {
    let mut size = None;
    let mut lanes = 1;
    for q in insn.parts().skip(1) {
        match q {
            "v2" => lanes = 2,
            "v4" => lanes = 4,
            "v8" => lanes = 8,
            "b8" | "u8" | "s8" | "e4m3" | "e5m2" => size = Some(1),
            "b16" | "u16" | "s16" | "f16" | "bf16" => size = Some(2),
            "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" | "tf32" => size = Some(4),
            "b64" | "u64" | "s64" | "f64" => size = Some(8),
            "b128" => size = Some(16),
            _ => {}
        }
    }
    size.map(|s| s * lanes)
}

/// What `insn` does to global memory, by the PTX ISA; `None` when it never touches it.
pub fn global_access(insn: &PtxInstruction<'_>) -> Option<Touch> {
    let parts: Vec<&str> = insn.parts().collect();
    let has = |q: &str| parts[1..].contains(&q);
    let global = has("global");
    let generic = !global && !parts[1..].iter().any(|q| other_space(q));
    let typed = || typed_bytes(insn).map_or(Bytes::Unknown, Bytes::Typed);
    let data = |class, reads, writes, generic, operand, bytes| {
        Some(Touch::Data(GlobalAccess { class, reads, writes, generic, operand, bytes }))
    };
    match parts[0] {
        "ld" | "ldu" if global || generic => {
            data(MemClass::LoadStore, true, false, generic, 1, typed())
        }
        "st" if (global || generic) && !has("async") && !has("bulk") => {
            data(MemClass::LoadStore, false, true, generic, 0, typed())
        }
        "atom" if global || generic => data(MemClass::Atomic, true, true, generic, 1, typed()),
        "red" if (global || generic) && !has("async") => {
            data(MemClass::Atomic, true, true, generic, 0, typed())
        }
        "cp" => copy(insn, &parts),
        "tex" | "tld4" => data(MemClass::Texture, true, false, false, 1, Bytes::Unknown),
        "suld" => data(MemClass::Surface, true, false, false, 1, Bytes::Unknown),
        "sust" => data(MemClass::Surface, false, true, false, 0, Bytes::Unknown),
        "sured" => data(MemClass::Surface, true, true, false, 0, Bytes::Unknown),
        "multimem" => match parts.get(1) {
            Some(&"ld_reduce") => data(MemClass::Multimem, true, false, false, 1, typed()),
            Some(&"st") => data(MemClass::Multimem, false, true, false, 0, typed()),
            Some(&"red") => data(MemClass::Multimem, true, true, false, 0, typed()),
            // `multimem.cp.*` and later forms: memory, how is not known here.
            _ => data(MemClass::Multimem, true, true, false, 0, Bytes::Unknown),
        },
        "wmma" if global || generic => match parts.get(1) {
            Some(&"load") => data(MemClass::Matrix, true, false, generic, 1, Bytes::Unknown),
            Some(&"store") => data(MemClass::Matrix, false, true, generic, 0, Bytes::Unknown),
            _ => None,
        },
        "tensormap" => match parts.get(1) {
            Some(&"replace") if global || generic => {
                data(MemClass::TensorMap, false, true, generic, 0, typed())
            }
            Some(&"cp_fenceproxy") => {
                data(MemClass::TensorMap, false, true, false, 0, Bytes::Operand(2))
            }
            _ => None,
        },
        "prefetch" | "prefetchu" | "applypriority" | "discard" => {
            (global || generic).then_some(Touch::Hint)
        }
        // Shared memory only, or no memory at all.
        "mbarrier" | "ldmatrix" | "stmatrix" | "fence" | "membar" | "bar" | "barrier" | "cvta"
        | "isspacep" | "mapa" | "getctarank" | "createpolicy" | "txq" | "suq" | "istypep"
        | "wgmma" | "mma" | "tcgen05" | "call" | "alloca" | "stacksave" | "stackrestore" | "st"
        | "red" | "ld" | "ldu" | "atom" | "wmma" => None,
        _ if has_memory_operand(insn) && (global || generic) => {
            data(MemClass::Unknown, true, true, generic, 0, Bytes::Unknown)
        }
        _ => None,
    }
}

/// The `cp` family: asynchronous, bulk and tensor copies, and their reductions.
fn copy(insn: &PtxInstruction<'_>, parts: &[&str]) -> Option<Touch> {
    let has = |q: &str| parts[1..].contains(&q);
    // The destination state space comes first after the family's qualifiers, then the source.
    let spaces: Vec<&str> = parts[1..]
        .iter()
        .copied()
        .filter(|q| *q == "global" || *q == "shared" || q.starts_with("shared::"))
        .collect();
    let touch = |class, reads, writes, operand, bytes| {
        Some(Touch::Data(GlobalAccess { class, reads, writes, generic: false, operand, bytes }))
    };
    let reduce = parts.get(1) == Some(&"reduce");
    let tensor = has("tensor");
    if has("prefetch") {
        return has("global").then_some(Touch::Hint);
    }
    match (spaces.first(), spaces.get(1)) {
        // cp.async.{ca,cg}.shared{::cta}.global: per thread, global to shared.
        _ if !has("bulk") && has("async") => match has("global") {
            true => touch(MemClass::AsyncCopy, true, false, 1, Bytes::AsyncCopy),
            false => None,
        },
        (Some(&"global"), _) => {
            // To global memory, from shared memory.
            let class = if tensor { MemClass::TensorCopy } else { MemClass::BulkCopy };
            let bytes = if tensor { Bytes::Unknown } else { Bytes::Operand(2) };
            touch(class, reduce, true, 0, bytes)
        }
        (Some(_), Some(&"global")) => {
            let class = if tensor { MemClass::TensorCopy } else { MemClass::BulkCopy };
            let bytes = if tensor { Bytes::Unknown } else { Bytes::Operand(2) };
            touch(class, true, false, 1, bytes)
        }
        // Between shared memories, or `cp` forms without global memory.
        _ if has_memory_operand(insn) && has("global") => {
            touch(MemClass::Unknown, true, true, 0, Bytes::Unknown)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One instruction, read from its text as the PTX reader would.
    fn read(text: &str) -> Touch {
        let ptx = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.entry k()\n{{\n\t{text};\n}}\n"
        );
        let module = crate::ptx::PtxModule::parse(&ptx).expect("reads");
        let f = module.function("k").expect("k");
        let insns = module.instructions(f);
        global_access(&insns[0].1).unwrap_or(Touch::Hint)
    }

    fn access(text: &str) -> GlobalAccess {
        match read(text) {
            Touch::Data(a) => a,
            Touch::Hint => panic!("`{text}` is not a global memory instruction"),
        }
    }

    #[test]
    fn the_table_classes_every_form_the_isa_gives() {
        use MemClass::*;
        // (instruction, class, reads, writes, generic, operand, bytes)
        let cases: &[(&str, MemClass, bool, bool, bool, usize, Bytes)] = &[
            (
                "ld.global.nc.v4.f32 {%f1,%f2,%f3,%f4}, [%rd1]",
                LoadStore,
                true,
                false,
                false,
                1,
                Bytes::Typed(16),
            ),
            ("ld.u64 %rd2, [%rd1+8]", LoadStore, true, false, true, 1, Bytes::Typed(8)),
            (
                "ld.global.L1::evict_last.L2::cache_hint.b32 %r1, [%rd1], %rd9",
                LoadStore,
                true,
                false,
                false,
                1,
                Bytes::Typed(4),
            ),
            ("ldu.global.f32 %f1, [%rd1]", LoadStore, true, false, false, 1, Bytes::Typed(4)),
            (
                "st.global.v2.u32 [%rd1], {%r1,%r2}",
                LoadStore,
                false,
                true,
                false,
                0,
                Bytes::Typed(8),
            ),
            ("st.volatile.u8 [%rd1], %rs1", LoadStore, false, true, true, 0, Bytes::Typed(1)),
            ("atom.global.add.u32 %r1, [%rd1], 1", Atomic, true, true, false, 1, Bytes::Typed(4)),
            (
                "atom.acq_rel.gpu.global.cas.b64 %rd3, [%rd1], %rd4, %rd5",
                Atomic,
                true,
                true,
                false,
                1,
                Bytes::Typed(8),
            ),
            ("atom.add.f32 %f1, [%rd1], %f2", Atomic, true, true, true, 1, Bytes::Typed(4)),
            ("red.global.add.u32 [%rd1], %r1", Atomic, true, true, false, 0, Bytes::Typed(4)),
            (
                "red.relaxed.gpu.global.add.noftz.v2.f16x2 [%rd1], {%r1,%r2}",
                Atomic,
                true,
                true,
                false,
                0,
                Bytes::Typed(8),
            ),
            (
                "cp.async.ca.shared.global [%r1], [%rd1], 4",
                AsyncCopy,
                true,
                false,
                false,
                1,
                Bytes::AsyncCopy,
            ),
            (
                "cp.async.cg.shared.global.L2::128B [%r1], [%rd1], 16, %r2",
                AsyncCopy,
                true,
                false,
                false,
                1,
                Bytes::AsyncCopy,
            ),
            (
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, [%r3]",
                BulkCopy,
                true,
                false,
                false,
                1,
                Bytes::Operand(2),
            ),
            (
                "cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 256",
                BulkCopy,
                false,
                true,
                false,
                0,
                Bytes::Operand(2),
            ),
            (
                "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r1], 256",
                BulkCopy,
                true,
                true,
                false,
                0,
                Bytes::Operand(2),
            ),
            (
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4]",
                TensorCopy,
                true,
                false,
                false,
                1,
                Bytes::Unknown,
            ),
            (
                "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r3}], [%r1]",
                TensorCopy,
                false,
                true,
                false,
                0,
                Bytes::Unknown,
            ),
            (
                "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%rd1, {%r2}], [%r1]",
                TensorCopy,
                true,
                true,
                false,
                0,
                Bytes::Unknown,
            ),
            (
                "tex.2d.v4.f32.f32 {%f1,%f2,%f3,%f4}, [%rd1, {%f5,%f6}]",
                Texture,
                true,
                false,
                false,
                1,
                Bytes::Unknown,
            ),
            (
                "suld.b.2d.v4.b32.trap {%r1,%r2,%r3,%r4}, [%rd1, {%r5,%r6}]",
                Surface,
                true,
                false,
                false,
                1,
                Bytes::Unknown,
            ),
            (
                "multimem.ld_reduce.relaxed.sys.global.add.f32 %f1, [%rd1]",
                Multimem,
                true,
                false,
                false,
                1,
                Bytes::Typed(4),
            ),
            (
                "wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {%r1,%r2}, [%rd1], %r3",
                Matrix,
                true,
                false,
                false,
                1,
                Bytes::Unknown,
            ),
            (
                "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2",
                TensorMap,
                false,
                true,
                false,
                0,
                Bytes::Typed(8),
            ),
            (
                "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [%r1], 128",
                TensorMap,
                false,
                true,
                false,
                0,
                Bytes::Operand(2),
            ),
            ("frobnicate.global.b32 %r1, [%rd1]", Unknown, true, true, false, 0, Bytes::Unknown),
        ];
        for &(text, class, reads, writes, generic, operand, bytes) in cases {
            let want = GlobalAccess { class, reads, writes, generic, operand, bytes };
            assert_eq!(access(text), want, "{text}");
        }
    }

    #[test]
    fn other_state_spaces_hints_and_bookkeeping_are_not_global_memory_instructions() {
        for text in [
            "ld.param.u64 %rd1, [p]",
            "ld.shared.v4.u32 {%r1,%r2,%r3,%r4}, [%r5]",
            "ld.shared::cluster.u32 %r1, [%r5]",
            "st.local.u32 [%rd1], %r1",
            "ld.const.f32 %f1, [c]",
            "atom.shared.add.u32 %r1, [%r2], 1",
            "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3]",
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3]",
            "cp.async.commit_group",
            "cp.async.wait_group 0",
            "cp.async.mbarrier.arrive.b64 [%r1]",
            "cp.async.bulk.commit_group",
            "cp.async.bulk.wait_group.read 0",
            "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r1], [%r2], 64, [%r3]",
            "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2",
            "mbarrier.arrive.b64 %rd1, [%rd2]",
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1,%r2,%r3,%r4}, [%r5]",
            "fence.proxy.tensormap::generic.acquire.gpu [%rd1], 128",
            "cvta.to.global.u64 %rd1, %rd2",
            "mov.u64 %rd1, %rd2",
            "bar.sync 0",
        ] {
            let ptx = format!(
                ".version 8.0\n.target sm_90\n.address_size 64\n.entry k()\n{{\n\t{text};\n}}\n"
            );
            let module = crate::ptx::PtxModule::parse(&ptx).expect("reads");
            let insns = module.instructions(module.function("k").expect("k"));
            assert_eq!(global_access(&insns[0].1), None, "{text}");
        }
        for text in [
            "prefetch.global.L2 [%rd1]",
            "prefetchu.L1 [%rd1]",
            "cp.async.bulk.prefetch.L2.global [%rd1], 256",
            "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r1, %r2}]",
            "discard.global.L2 [%rd1], 128",
            "applypriority.global.L2::evict_normal [%rd1], 128",
        ] {
            assert_eq!(read(text), Touch::Hint, "{text}");
        }
    }
}
