//! Probes sampled by warps: a probe given in [`WarpSampling`] runs in one warp (or block) in N
//! only, and a kernel with such probes is compiled as two copies of its body, so that the warps
//! not sampled run a body without them.
//!
//! Which warps: a thread's warp key is `block.x · 32 + warp` (the warp's index in its block,
//! from the thread's linear index) with `block.y` and `block.z` xored into its high bits
//! (`<< 32`, `<< 48`); the warp is sampled when the upper 32 bits of `key × 0x9E3779B97F4A7C15`
//! (Fibonacci hashing) are below `2³² >> shift` ([`warp_sampled`], the same rule on the CPU).
//! Every lane of a warp has the same key, so a warp never splits between the copies, and the
//! sampled warps are spread over the grid whatever its shape.
//!
//! The copies: at the kernel's start, after the entry probes, the thread computes the test and
//! branches to the copy of its kind. The copy for the warps not sampled is the body with every
//! sampled probe taken out (its labels renamed, a `ret` at its end); the other keeps them. The
//! registers a kernel takes are the most either copy needs, but where the kernel's registers are
//! bound (`.maxnreg`, [`InjectOptions::registers`](super::InjectOptions::registers)) `ptxas`
//! keeps what does not fit in the sampled copy's local memory and leaves the other copy as the
//! kernel was: nvcc's grid-stride saxpy of `mem_timing.cu` (30 registers) with the `timeline`
//! set took 46 registers unbound; bound to 32, it spilled 148 bytes, all in the sampled copy
//! (`ptxas` 13). A
//! kernel whose body declares `.shared` or `.local` variables inside a nested block, and device
//! functions, are not copied: there each sampled probe tests the warp where it runs.
//!
//! Each sampled probe's code is marked where it is emitted ([`mark`]): the marks (comments
//! whose text holds the injector's stem, which the module's text does not) let the copies take
//! the probe out, or only its test.

use std::collections::BTreeSet;

use crate::ptx::{Function, PieceKind, PtxModule};

/// Which warps a probe runs in: one in `1 << shift`, chosen one by one or, with `blocks`, by
/// whole blocks (one block in N, each of its warps: warps that wait for each other at the
/// block's barriers are slowed together, not one holding back the others).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sample {
    /// log2 N (at most 31); 0: every warp.
    pub shift: u32,
    /// Whole blocks.
    pub blocks: bool,
}

impl Sample {
    /// Every warp.
    pub const EVERY: Sample = Sample { shift: 0, blocks: false };

    /// One warp in `1 << shift`.
    pub fn warps(shift: u32) -> Sample {
        Sample { shift: shift.min(31), blocks: false }
    }

    /// One block in `1 << shift`.
    pub fn blocks(shift: u32) -> Sample {
        Sample { shift: shift.min(31), blocks: true }
    }

    /// Whether it samples at all (N above 1).
    pub fn is_sampled(self) -> bool {
        self.shift > 0
    }
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = if self.blocks { "block" } else { "warp" };
        write!(f, "one {unit} in {}", 1u64 << self.shift)
    }
}

/// Probes that run in one warp (or block) in N only
/// ([`InjectOptions::sampled`](super::InjectOptions::sampled)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarpSampling {
    /// The probes sampled: their indices in the probes given to [`inject_with`](super::inject_with).
    pub probes: Vec<usize>,
    /// Which warps they run in.
    pub sample: Sample,
}

impl WarpSampling {
    /// The sampling of probes given by their [`Sample`]s in order: `None` when none is
    /// sampled, an error naming two that are sampled differently (a kernel has one copy for
    /// the sampled warps).
    pub fn of(samples: impl IntoIterator<Item = Sample>) -> Result<Option<WarpSampling>, String> {
        let mut out: Option<WarpSampling> = None;
        for (i, sample) in samples.into_iter().enumerate().filter(|(_, s)| s.is_sampled()) {
            match &mut out {
                None => out = Some(WarpSampling { probes: vec![i], sample }),
                Some(w) if w.sample == sample => w.probes.push(i),
                Some(w) => {
                    return Err(format!(
                        "probe {} runs in {}, probe {i} in {sample}: sampled probes share one \
                         sampling",
                        w.probes[0], w.sample
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// The multiplier of the warps' Fibonacci hashing: 2⁶⁴ over the golden ratio.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A warp's key: `block.x · 32 + warp`, `block.y` and `block.z` xored into its high bits.
pub fn warp_key(block: [u32; 3], warp: u32) -> u64 {
    (u64::from(block[0]) * 32 + u64::from(warp))
        ^ (u64::from(block[1]) << 32)
        ^ (u64::from(block[2]) << 48)
}

/// Whether warp `warp` of block `block` is one that probes sampled as `sample` says run in
/// (by blocks, the key of the block's warp 0 decides for all): the rule the kernel's test
/// follows, for probes run on the CPU.
pub fn warp_sampled(block: [u32; 3], warp: u32, sample: Sample) -> bool {
    let key = warp_key(block, if sample.blocks { 0 } else { warp });
    (key.wrapping_mul(GOLDEN) >> 32) < ((1u64 << 32) >> sample.shift.min(31))
}

/// PTX that sets the predicate `pred` (declared by the caller) when the thread's warp is
/// sampled, in a block of its own whose registers start with `stem`.
pub(super) fn test(stem: &str, pred: &str, sample: Sample) -> String {
    let (g0, g1, g2) = (format!("%{stem}_g0"), format!("%{stem}_g1"), format!("%{stem}_g2"));
    let (k0, k1) = (format!("%{stem}_gk0"), format!("%{stem}_gk1"));
    let limit = (1u64 << 32) >> sample.shift.min(31);
    let mut lines =
        vec![format!("mov.u32 {g1}, %ctaid.x;"), format!("mul.wide.u32 {k0}, {g1}, 32;")];
    if !sample.blocks {
        // Plus the warp in the block: the thread's linear index over 32 (by blocks, warp 0's).
        lines.extend([
            format!("mov.u32 {g0}, %tid.z;"),
            format!("mov.u32 {g1}, %ntid.y;"),
            format!("mov.u32 {g2}, %tid.y;"),
            format!("mad.lo.u32 {g0}, {g0}, {g1}, {g2};"),
            format!("mov.u32 {g1}, %ntid.x;"),
            format!("mov.u32 {g2}, %tid.x;"),
            format!("mad.lo.u32 {g0}, {g0}, {g1}, {g2};"),
            format!("shr.u32 {g0}, {g0}, 5;"),
            format!("cvt.u64.u32 {k1}, {g0};"),
            format!("add.s64 {k0}, {k0}, {k1};"),
        ]);
    }
    lines.extend([
        format!("mov.u32 {g1}, %ctaid.y;"),
        format!("cvt.u64.u32 {k1}, {g1};"),
        format!("shl.b64 {k1}, {k1}, 32;"),
        format!("xor.b64 {k0}, {k0}, {k1};"),
        format!("mov.u32 {g1}, %ctaid.z;"),
        format!("cvt.u64.u32 {k1}, {g1};"),
        format!("shl.b64 {k1}, {k1}, 48;"),
        format!("xor.b64 {k0}, {k0}, {k1};"),
        format!("mul.lo.u64 {k0}, {k0}, {};", GOLDEN as i64),
        format!("shr.u64 {k0}, {k0}, 32;"),
        format!("setp.lt.u64 {pred}, {k0}, {limit};"),
    ]);
    let body: String = lines.iter().map(|l| format!("\t{l}\n")).collect();
    format!("\t{{\n\t.reg .b32 {g0}, {g1}, {g2};\n\t.reg .b64 {k0}, {k1};\n{body}\t}}\n")
}

/// The sampling of a kernel whose instructions are `opcodes`: by whole blocks, whatever
/// `sample` says, when the kernel has an instruction that every thread of its block, or of a
/// warpgroup, must run together (`bar.sync` and the other `bar` and aligned `barrier`
/// instructions, `wgmma`, `setmaxnreg`, `tcgen05`): warps of one block in two copies would run
/// two different such instructions, which the PTX ISA leaves undefined. One warp in N still
/// records, but whole blocks of them.
pub(super) fn for_kernel<'a>(sample: Sample, mut opcodes: impl Iterator<Item = &'a str>) -> Sample {
    let together = |op: &str| {
        let base = op.split('.').next().unwrap_or("");
        (base == "bar" && !op.starts_with("bar.warp"))
            || (base == "barrier" && op.split('.').any(|q| q == "aligned"))
            || matches!(base, "wgmma" | "setmaxnreg" | "tcgen05")
    };
    match sample.blocks || !opcodes.any(together) {
        true => sample,
        false => Sample { blocks: true, ..sample },
    }
}

/// The marks around a sampled probe's code: its start, the end of its test, its end.
fn marks(stem: &str) -> [String; 3] {
    ["start", "tested", "end"].map(|m| format!("\t// {stem} sampled probe: {m}\n"))
}

/// A sampled probe's `code`, marked, after a test of the warp that skips it (to `label`, unique
/// in the function) in a warp not sampled.
pub(super) fn mark(stem: &str, label: &str, code: &str, sample: Sample) -> String {
    let [start, tested, end] = marks(stem);
    let pred = format!("%{stem}_gp");
    format!(
        "{start}\t{{\n\t.reg .pred {pred};\n{}\t@!{pred} bra {label};\n\t}}\n{tested}{code}{label}:\n{end}",
        test(stem, &pred, sample)
    )
}

/// `text` without what lies from each `from` to the `to` after it, both included.
fn cut(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        out.push_str(&rest[..at]);
        match rest[at..].find(to) {
            Some(end) => rest = &rest[at + end + to.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `c` may be part of a PTX identifier.
fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%')
}

/// `text` with every label it defines (an identifier that starts a line and is followed by
/// `:`) renamed, at its definition and every use, by appending `suffix`.
fn rename_labels(text: &str, suffix: &str) -> String {
    let labels: BTreeSet<&str> = text
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let end = line.find(|c: char| !ident(c))?;
            (end > 0 && line[end..].trim_start().starts_with(':')).then_some(&line[..end])
        })
        .collect();
    let mut out = String::with_capacity(text.len() + labels.len() * 8);
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once('\n')) {
        if ident(c) {
            word.push(c);
            continue;
        }
        out.push_str(&word);
        if labels.contains(word.as_str()) {
            out.push_str(suffix);
        }
        word.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// The pieces of kernel `f`'s body to declare once, before the copies (its `.shared` and
/// `.local` variables, which a copy would allocate twice), or `None` when the body cannot be
/// copied (such a variable inside a nested block).
pub(super) fn hoisted(module: &PtxModule, f: &Function) -> Option<Vec<usize>> {
    let mut depth = 0usize;
    let mut out = Vec::new();
    for k in f.body.clone() {
        match module.pieces()[k].kind {
            PieceKind::Open => depth += 1,
            PieceKind::Close => depth = depth.saturating_sub(1),
            PieceKind::Statement => {
                let text = module.piece_text(k).trim_start();
                if text.starts_with(".shared") || text.starts_with(".local") {
                    if depth != 1 {
                        return None;
                    }
                    out.push(k);
                }
            }
            _ => {}
        }
    }
    Some(out)
}

/// A kernel's body as two copies: `inner` (its body between `{` and `}`, instrumented, sampled
/// probes marked) for the warps not sampled, without the sampled probes and ending in `ret`,
/// and for the sampled ones, without the probes' tests. `stem` names the test's predicate and
/// the label of the second copy; the first thing run is the test.
pub(super) fn copies(stem: &str, inner: &str, sample: Sample) -> String {
    let [start, tested, end] = marks(stem);
    let pred = format!("%{stem}_sampled");
    let label = format!("${stem}_sampled");
    let plain = rename_labels(&cut(inner, &start, &end), &format!("_{stem}u"));
    let sampled = cut(inner, &start, &tested);
    format!(
        "\n\t.reg .pred {pred};\n{}\t@{pred} bra {label};\n\t{{\n{plain}\n\tret;\n\t}}\n{label}:\n\t{{\n{sampled}\n\t}}\n",
        test(stem, &pred, sample)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warp_in_n_is_sampled_over_any_grid() {
        for shift in [0, 1, 5, 10] {
            let n = 1u64 << shift;
            // 64 blocks of 8 warps, and 512 blocks of one warp: about one in N either way.
            let wide = (0..64u32)
                .flat_map(|b| (0..8).map(move |w| ([b, 0, 0], w)))
                .filter(|&(b, w)| warp_sampled(b, w, Sample::warps(shift)))
                .count() as u64;
            let tall = (0..512u32).filter(|&y| warp_sampled([0, y, 0], 0, Sample::warps(shift)));
            // By blocks: one block in N, all 8 of its warps.
            let blocks = (0..512u32).filter(|&b| warp_sampled([b, 0, 0], 3, Sample::blocks(shift)));
            for got in [wide, tall.count() as u64, blocks.count() as u64] {
                let want = 512 / n;
                assert!(got.abs_diff(want) <= want / 2 + 2, "1 in {n}: {got} of 512");
            }
            let block = |b: u32| {
                (0..8).filter(|&w| warp_sampled([b, 1, 0], w, Sample::blocks(shift))).count()
            };
            assert!((0..64).all(|b| matches!(block(b), 0 | 8)), "whole blocks");
        }
        assert!(warp_sampled([123, 4, 5], 6, Sample::EVERY));
        assert_eq!(Sample::blocks(5).to_string(), "one block in 32");
    }

    #[test]
    fn probes_share_one_sampling() {
        let [every, five] = [Sample::EVERY, Sample::warps(5)];
        assert_eq!(WarpSampling::of([every, every]), Ok(None));
        let w = WarpSampling::of([every, five, every, five]).expect("one").expect("sampled");
        assert_eq!((w.probes, w.sample), (vec![1, 3], five));
        let e = WarpSampling::of([five, Sample::warps(3)]).expect_err("two samplings");
        assert!(e.contains("one warp in 32") && e.contains("one warp in 8"), "{e}");
        let e = WarpSampling::of([five, Sample::blocks(5)]).expect_err("warps and blocks");
        assert!(e.contains("one block in 32"), "{e}");
    }

    #[test]
    fn kernels_whose_blocks_wait_together_are_sampled_by_blocks() {
        let warps = Sample::warps(5);
        assert_eq!(for_kernel(warps, ["ld.global.f32", "bar.warp.sync"].into_iter()), warps);
        for op in [
            "bar.sync",
            "barrier.sync.aligned",
            "wgmma.fence.sync.aligned",
            "setmaxnreg.inc.sync.aligned.u32",
        ] {
            assert_eq!(
                for_kernel(warps, ["ld.global.f32", op].into_iter()),
                Sample::blocks(5),
                "{op}"
            );
        }
        assert_eq!(for_kernel(warps, ["barrier.sync"].into_iter()), warps);
    }

    #[test]
    fn labels_are_renamed_where_defined_and_used_only() {
        let text =
            "$L1:\n\tbra $L1;\n\t@%p bra $L10;\nfoo: .branchtargets $L1;\n\tmov %r1, $L10x;\n";
        let got = rename_labels(text, "_u");
        assert_eq!(
            got,
            "$L1_u:\n\tbra $L1_u;\n\t@%p bra $L10;\nfoo_u: .branchtargets $L1_u;\n\tmov %r1, $L10x;\n"
        );
    }

    #[test]
    fn the_copies_take_out_the_probes_or_their_tests() {
        let probe = mark("egpu", "$egpu_ws1", "\tPROBE;\n", Sample::warps(5));
        let inner = format!("$L0:\n{probe}\tld.global.f32 %f1, [%rd1];\n\tbra $L0;\n");
        let both = copies("egpu", &inner, Sample::warps(5));
        let (plain, sampled) = both.split_once("$egpu_sampled:\n").expect("two copies");
        assert_eq!(plain.matches("PROBE").count(), 0);
        assert!(plain.contains("$L0_egpuu:") && plain.contains("bra $L0_egpuu;"));
        assert!(plain.contains("\tret;\n"));
        assert_eq!(sampled.matches("PROBE").count(), 1);
        assert!(sampled.contains("$L0:") && !sampled.contains("%egpu_gp"));
        assert!(both.contains("setp.lt.u64 %egpu_sampled, %egpu_gk0, 134217728;"));
        // Without copies, the probe tests its warp where it runs.
        assert!(probe.contains("@!%egpu_gp bra $egpu_ws1;"));
    }
}
