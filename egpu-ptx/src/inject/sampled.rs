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
//! Drawn by turns ([`Sample::turns`]), the copies are of each outermost loop instead, after
//! one head that draws the warp again ([`by_turns`]); the code outside the loops runs once.
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
    /// Drawn again at each turn of a loop ([`Sample::turns`]).
    pub turns: bool,
}

impl Sample {
    /// Every warp.
    pub const EVERY: Sample = Sample { shift: 0, blocks: false, turns: false };

    /// One warp in `1 << shift`.
    pub fn warps(shift: u32) -> Sample {
        Sample { shift: shift.min(31), blocks: false, turns: false }
    }

    /// One block in `1 << shift`.
    pub fn blocks(shift: u32) -> Sample {
        Sample { shift: shift.min(31), blocks: true, turns: false }
    }

    /// One warp in `1 << shift` at each turn of a loop: a warp is drawn at its start, as
    /// [`Sample::warps`] draws it, and again each time it reaches the head of a loop of the
    /// kernel (a label a later branch goes back to), from its key and the turns it took, and
    /// goes on in the copy of its draw. So every warp runs the probes in about one turn in N,
    /// and a kernel of few waves is not held back by a few sampled warps that run them all
    /// along (a kernel without loops is sampled by warps).
    pub fn turns(shift: u32) -> Sample {
        Sample { shift: shift.min(31), blocks: false, turns: true }
    }

    /// Whether it samples at all (N above 1).
    pub fn is_sampled(self) -> bool {
        self.shift > 0
    }
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = if self.blocks { "block" } else { "warp" };
        write!(f, "one {unit} in {}", 1u64 << self.shift)?;
        if self.turns { write!(f, " at each turn of a loop") } else { Ok(()) }
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
/// What each turn of a loop adds to a warp's draw: 2³² over the golden ratio, so that the
/// draws of a warp's turns step evenly over 2³² (a Weyl sequence) and it records one turn in N,
/// spread out.
const TURNS: u32 = 0x9E37_79B9;

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
    let k0 = format!("%{stem}_gk0");
    let body: String = (key_lines(stem, &k0, sample).iter().chain(&draw_lines(&k0, pred, sample)))
        .map(|l| format!("\t{l}\n"))
        .collect();
    let (g0, g1, g2, k1) = registers(stem);
    format!("\t{{\n\t.reg .b32 {g0}, {g1}, {g2};\n\t.reg .b64 {k0}, {k1};\n{body}\t}}\n")
}

/// The registers of [`key_lines`]: three of 32 bits, one of 64.
fn registers(stem: &str) -> (String, String, String, String) {
    let r = |n: &str| format!("%{stem}_{n}");
    (r("g0"), r("g1"), r("g2"), r("gk1"))
}

/// PTX that puts the thread's warp key ([`warp_key`]; by blocks, its block's warp 0's) into
/// `key` (64 bits), with [`registers`] declared.
fn key_lines(stem: &str, key: &str, sample: Sample) -> Vec<String> {
    let (g0, g1, g2, k1) = registers(stem);
    let k0 = key;
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
    ]);
    lines
}

/// PTX that sets `pred` when the hashed `mixed` (a key, and the turns mixed in) falls in the
/// sampled one in N; `mixed` is spent.
fn draw_lines(mixed: &str, pred: &str, sample: Sample) -> [String; 3] {
    let limit = (1u64 << 32) >> sample.shift.min(31);
    [
        format!("mul.lo.u64 {mixed}, {mixed}, {};", GOLDEN as i64),
        format!("shr.u64 {mixed}, {mixed}, 32;"),
        format!("setp.lt.u64 {pred}, {mixed}, {limit};"),
    ]
}

/// Whether the warp of `key` is drawn after `turns` turns of loops ([`Sample::turns`]): the
/// rule the kernel's draws follow. The warp's first draw ([`warp_sampled`]'s, at 0 turns) plus
/// `0x9E3779B9` (2³² over the golden ratio) a turn, modulo 2³², below the sampling's limit: two
/// 32-bit instructions a turn.
pub fn turn_sampled(key: u64, turns: u32, sample: Sample) -> bool {
    let first = (key.wrapping_mul(GOLDEN) >> 32) as u32;
    let draw = first.wrapping_add(turns.wrapping_mul(TURNS));
    u64::from(draw) < (1u64 << 32) >> sample.shift.min(31)
}

/// The sampling of a kernel whose instructions are `opcodes`: by whole blocks, whatever
/// `sample` says, when the kernel has an instruction that every thread of its block, or of a
/// warpgroup, must run together (`bar.sync` and the other `bar` and aligned `barrier`
/// instructions, `wgmma`, `setmaxnreg`, `tcgen05`): warps of one block in two copies would run
/// two different such instructions, which the PTX ISA leaves undefined. One warp in N still
/// records, but whole blocks of them.
pub(super) fn for_kernel<'a>(sample: Sample, opcodes: impl Iterator<Item = &'a str>) -> Sample {
    let together = |op: &str| {
        let base = op.split('.').next().unwrap_or("");
        (base == "bar" && !op.starts_with("bar.warp"))
            || (base == "barrier" && op.split('.').any(|q| q == "aligned"))
            || matches!(base, "wgmma" | "setmaxnreg" | "tcgen05")
    };
    let (mut together_seen, mut drawn_once) = (false, false);
    for op in opcodes {
        together_seen |= together(op);
        // Warp-specialised kernels (`setmaxnreg`, and `tcgen05`'s) run loops of different
        // lengths in their warpgroups, which would meet at a loop's head in different copies:
        // drawn once.
        drawn_once |= op.starts_with("setmaxnreg") || op.starts_with("tcgen05");
    }
    Sample { blocks: sample.blocks || together_seen, turns: sample.turns && !drawn_once, ..sample }
}

/// `code` with the CTA barriers made the forms that threads may reach at different
/// instructions (`barrier.sync` rather than `bar.sync`, `barrier.sync.aligned`; the same for
/// `arrive` and `red`): with warps drawn at each turn of a loop, warps of a block that took
/// different numbers of turns reach a barrier in different copies.
fn unaligned_barriers(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for line in code.split_inclusive('\n') {
        let t = line.trim_start();
        let op = t.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("");
        let new = ["bar.", "bar.cta.", "barrier.", "barrier.cta."].iter().find_map(|p| {
            let rest = op.strip_prefix(p)?;
            let (what, after) = rest.split_once('.').unwrap_or((rest, ""));
            if !matches!(what, "sync" | "arrive" | "red") {
                return None;
            }
            let cta = if p.contains("cta") { "cta." } else { "" };
            let after = after.strip_prefix("aligned").map_or(after, |a| a.trim_start_matches('.'));
            let dot = if after.is_empty() { "" } else { "." };
            Some(format!("barrier.{cta}{what}{dot}{after}"))
        });
        match new {
            Some(new) => out.push_str(&line.replacen(op, &new, 1)),
            None => out.push_str(line),
        }
    }
    out
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
/// the label of the second copy; the first thing run is the test. Sampled by turns, the copies
/// are of the kernel's loops instead ([`by_turns`]), where it has loops that allow it.
pub(super) fn copies(stem: &str, inner: &str, sample: Sample) -> String {
    if sample.turns
        && let Some(body) = by_turns(stem, inner, sample)
    {
        return body;
    }
    let [start, tested, end] = marks(stem);
    let pred = format!("%{stem}_sampled");
    let label = format!("${stem}_sampled");
    let plain = rename_labels(&cut(inner, &start, &end), &format!("_{stem}u"));
    let sampled = cut(inner, &start, &tested);
    let first = test(stem, &pred, sample);
    format!(
        "\n\t.reg .pred {pred};\n{first}\t@{pred} bra {label};\n\t{{\n{plain}\n\tret;\n\t}}\n{label}:\n\t{{\n{sampled}\n\t}}\n"
    )
}

/// A kernel's body sampled by turns ([`Sample::turns`]): each of its outermost loops as two
/// copies, one without the sampled probes and one with them, after one head that draws the
/// warp again ([`turn_sampled`]) and goes on in the copy drawn; the code outside the loops once,
/// each sampled probe there run by the warps of the first draw. One head, reached from before
/// the loop and from both copies' ends: a loop entered at two places is irreducible, and ptxas
/// then serialises every `wgmma` of the kernel (C7515). `None` when the body has no loop, or a
/// loop that a branch from outside enters past its head.
fn by_turns(stem: &str, inner: &str, sample: Sample) -> Option<String> {
    let [start, tested, end] = marks(stem);
    let (declared, body) = registers_apart(inner);
    let lines: Vec<&str> = body.split_inclusive('\n').collect();
    let regions = loops(&lines)?;
    let (key, turns, now) =
        (format!("%{stem}_key"), format!("%{stem}_turns"), format!("%{stem}_now"));
    let (m, q) = (format!("%{stem}_tm"), format!("%{stem}_tq"));
    let (g0, g1, g2, k1) = registers(stem);
    let keyed: String = key_lines(stem, &key, sample).iter().map(|l| format!("\t{l}\n")).collect();
    let draw = |into: &str| -> String {
        draw_lines(&m, into, sample).iter().map(|l| format!("\t{l}\n")).collect()
    };
    // `turns` holds the warp's draw: its first, then `TURNS` more at each loop head.
    let mut out = format!(
        "\n{declared}\t.reg .b64 {key};\n\t.reg .b32 {turns};\n\t.reg .pred {now};\n\t{{\n\t.reg \
         .b32 {g0}, {g1}, {g2};\n\t.reg .b64 {k1};\n{keyed}\t}}\n\t{{\n\t.reg .b64 {m};\n\tmov.b64 \
         {m}, {key};\n{}\tcvt.u32.u64 {turns}, {m};\n\t}}\n",
        draw(&now)
    );
    // The largest draw that records.
    let most = ((1u64 << 32) >> sample.shift.min(31)) - 1;
    let mut at = 0;
    for (first, last) in regions {
        out.push_str(&tested_once(&lines[at..first].concat(), stem, &now));
        let head = label_of(lines[first].trim_start())?;
        let region = lines[first + 1..=last].concat();
        let plain = rename_labels(&cut(&region, &start, &end), &format!("_{stem}u"));
        let sampled = rename_labels(&cut(&region, &start, &tested), &format!("_{stem}s"));
        let (drawn, past) = (format!("{head}_{stem}s"), format!("{head}_{stem}x"));
        // In a loop whose every turn starts with the whole warp together, the draw is made
        // uniform for ptxas (a vote of the full warp, a uniform branch): else it reads the
        // branch as divergent and keeps none of the loop's values in uniform registers, which
        // costs a Triton matmul's loop 153 instructions instead of 81 (book: gpu-backend.md).
        let uniform = match converged(&lines[first + 1..=last]) {
            true => format!("\tvote.sync.any.pred {q}, {q}, -1;\n\t@{q} bra.uni {drawn};\n"),
            false => format!("\t@{q} bra {drawn};\n"),
        };
        out.push_str(lines[first]);
        out.push_str(&format!(
            "\tadd.u32 {turns}, {turns}, {TURNS};\n\t{{\n\t.reg .pred {q};\n\tsetp.le.u32 {q}, {turns}, \
             {most};\n{uniform}\t}}\n{}\tbra {past};\n{drawn}:\n{}{past}:\n",
            unaligned_barriers(&plain),
            unaligned_barriers(&sampled),
        ));
        at = last + 1;
    }
    out.push_str(&tested_once(&lines[at..].concat(), stem, &now));
    Some(out)
}

/// Whether a loop's every turn starts with the whole warp together, by the program's own word:
/// its head's straight-line code (`body`, from the line after the head's label to the first
/// label or branch) has an instruction the warp must run converged (an `.aligned` one, which
/// `bar.sync`, `bar.red` and `bar.arrive` are, or a `.sync` one over the full warp, `-1` or
/// `0xffffffff`). The draws' warp-uniform branch is then as safe as the program.
fn converged(body: &[&str]) -> bool {
    for line in body {
        let code = line.split("//").next().unwrap_or("").trim();
        if label_of(code).is_some() || branch_target(code).is_some() {
            return false;
        }
        let op = code.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("");
        let op = op.trim_end_matches(';');
        let full_warp = op.contains(".sync")
            && code
                .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .any(|w| matches!(w, "-1" | "0xffffffff" | "0xFFFFFFFF" | "4294967295"));
        let aligned = op.split('.').any(|w| w == "aligned")
            || [
                "bar.sync",
                "bar.red",
                "bar.arrive",
                "bar.cta.sync",
                "bar.cta.red",
                "bar.cta.arrive",
            ]
            .iter()
            .any(|b| op == *b || op.starts_with(&format!("{b}.")));
        if full_warp || aligned {
            return true;
        }
    }
    false
}

/// `text` with each marked sampled probe's own test made a test of the draw `now`.
fn tested_once(text: &str, stem: &str, now: &str) -> String {
    let [start, tested, _] = marks(stem);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&start) {
        out.push_str(&rest[..at]);
        let test_end = rest[at..].find(&tested).map_or(rest.len(), |e| at + e + tested.len());
        if let Some(label) = rest[at..test_end].lines().find_map(|l| branch_target(l.trim_start()))
        {
            out.push_str(&format!("\t@!{now} bra {label};\n"));
        }
        rest = &rest[test_end..];
    }
    out.push_str(rest);
    out
}

/// The `.reg` declarations at the top level of `body` (not in a nested block), each once, and
/// `body` without them.
fn registers_apart(body: &str) -> (String, String) {
    let (mut declared, mut rest) = (String::new(), String::with_capacity(body.len()));
    let mut depth = 0i64;
    for line in body.split_inclusive('\n') {
        let t = line.trim_start();
        if depth == 0 && t.starts_with(".reg") {
            if !declared.split_inclusive('\n').any(|d| d == line) {
                declared.push_str(line);
            }
        } else {
            rest.push_str(line);
        }
        depth += braces(t);
    }
    (declared, rest)
}

/// How many blocks a line of PTX opens, less those it closes (the braces of vector operands,
/// `{%r1, %r2}`, open and close on one line).
fn braces(line: &str) -> i64 {
    let code = line.split("//").next().unwrap_or("");
    code.matches('{').count() as i64 - code.matches('}').count() as i64
}

/// The outermost loops of `lines` (a body's top level), as the first and last line of each: a
/// label at the top level, to the last branch back to it, loops that overlap joined, in order.
/// `None` when there is none, or when a branch from outside a loop goes to a label inside it
/// other than its head, or a loop ends inside a nested block.
fn loops(lines: &[&str]) -> Option<Vec<(usize, usize)>> {
    let mut depth = 0i64;
    // Labels as (name, line, depth); loops as (head's line, last branch back's line).
    let mut defined: Vec<(&str, usize, i64)> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if let Some(name) = label_of(t) {
            defined.push((name, i, depth));
        } else if let Some(target) = branch_target(t) {
            let back = defined.iter().find(|d| d.0 == target && d.2 == 0);
            if let Some(&(_, at, _)) = back {
                spans.push((at, i));
            }
        }
        depth += braces(t);
        if spans.last().is_some_and(|s| s.1 == i) && depth != 0 {
            return None;
        }
    }
    spans.sort_unstable();
    let mut regions: Vec<(usize, usize)> = Vec::new();
    for (a, b) in spans {
        match regions.last_mut() {
            Some(r) if a <= r.1 => r.1 = r.1.max(b),
            _ => regions.push((a, b)),
        }
    }
    // No way into a loop but its head.
    for &(a, b) in &regions {
        let inside: BTreeSet<&str> =
            (a + 1..=b).filter_map(|i| label_of(lines[i].trim_start())).collect();
        let from_outside = (0..lines.len()).filter(|i| !(a..=b).contains(i));
        if from_outside.flat_map(|i| lines[i].split(|c| !ident(c))).any(|w| inside.contains(w)) {
            return None;
        }
    }
    (!regions.is_empty()).then_some(regions)
}

/// The label a branch goes to, if the line is one.
fn branch_target(line: &str) -> Option<&str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "bra" || w.starts_with("bra."))?;
    Some(words.get(at + 1)?.trim_end_matches(';'))
}

/// The label a line defines, if any.
fn label_of(line: &str) -> Option<&str> {
    let end = line.find(|c: char| !ident(c))?;
    (end > 0 && line[end..].trim_start().starts_with(':')).then_some(&line[..end])
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

    /// By turns: the loop is copied after one head that draws the warp again; the code
    /// before and after it is not, its probes tested against the first draw; the registers are
    /// declared once; barriers in the loop become the forms reached from different
    /// instructions. At 0 turns the draw is the warps' own.
    #[test]
    fn turns_draw_again_at_each_loop_head() {
        let probe = |n: u32| {
            let code = format!("\t.reg .b32 %own;\n\tPROBE{n};\n");
            mark("egpu", &format!("$egpu_ws{n}"), &code, Sample::turns(5))
        };
        let inner = format!(
            "\t.reg .b32 %r<4>;\n{}\tbar.sync 0;\n$L0:\n{}\tld.global.f32 %f1, [%rd1];\n\t@%p bra \
             $L1;\n\tbar.sync 0;\n$L1:\n\t{{\n$W:\n\t@%p bra $W;\n\t}}\n\t@%p bra $L0;\n{}\tret;\n",
            probe(1),
            probe(2),
            probe(3)
        );
        let body = copies("egpu", &inner, Sample::turns(5));
        assert_eq!(body.matches(".reg .b32 %r<4>;").count(), 1, "{body}");
        assert_eq!(body.matches(".reg .b32 %own;").count(), 1, "{body}");
        // Before and after the loop: once, each probe tested against the first draw.
        assert_eq!(body.matches("PROBE1").count() + body.matches("PROBE3").count(), 2, "{body}");
        assert!(body.contains("@!%egpu_now bra $egpu_ws1;\n\tPROBE1;"), "{body}");
        assert!(body.contains("@!%egpu_now bra $egpu_ws3;"), "{body}");
        assert!(!body.contains("%egpu_gp") && body.contains("\tbar.sync 0;\n$L0:\n"), "{body}");
        // The loop: one head, which draws again, then the plain copy, then the sampled one.
        let head =
            body.find("$L0:\n\tadd.u32 %egpu_turns, %egpu_turns, 2654435769;").expect("the head");
        // One warp in 32 records: draws up to 2^27 - 1.
        assert!(body[head..].contains("setp.le.u32 %egpu_tq, %egpu_turns, 134217727;"), "{body}");
        let (plain, sampled) = body[head..].split_once("$L0_egpus:\n").expect("two copies");
        assert!(plain.contains("@%egpu_tq bra $L0_egpus;") && plain.ends_with("bra $L0_egpux;\n"));
        assert!(!plain.contains("PROBE2") && sampled.contains("PROBE2"), "{body}");
        assert!(!sampled.contains("@!%egpu_now bra $egpu_ws2"), "{body}");
        // Both copies go back to the one head; their own labels are their own.
        assert!(plain.contains("@%p bra $L0;") && sampled.contains("@%p bra $L0;"));
        assert!(plain.contains("@%p bra $L1_egpuu;") && plain.contains("$L1_egpuu:"));
        assert!(sampled.contains("@%p bra $L1_egpus;") && sampled.contains("$L1_egpus:"));
        assert!(plain.contains("barrier.sync 0;") && sampled.contains("barrier.sync 0;"));
        // Both leave the loop to the code after it.
        let past = sampled.find("$L0_egpux:\n").expect("where both copies leave the loop");
        assert!(sampled[past..].contains("PROBE3"), "{body}");
        assert_eq!(
            unaligned_barriers("\t@%p bar.red.popc.u32 %r1, 0, %p2;\n"),
            "\t@%p barrier.red.popc.u32 %r1, 0, %p2;\n"
        );
        assert_eq!(
            unaligned_barriers("\tbarrier.cta.sync.aligned 1, 64;\n"),
            "\tbarrier.cta.sync 1, 64;\n"
        );
        assert_eq!(unaligned_barriers("\tbar.warp.sync -1;\n"), "\tbar.warp.sync -1;\n");
        // A branch from outside into the loop past its head: copies as by warps.
        let entered = format!("\t@%p bra $L1;\n{inner}");
        let once = copies("egpu", &entered, Sample::turns(5));
        assert!(!once.contains("%egpu_turns") && once.contains("@%egpu_sampled bra"), "{once}");
        // The draws: at 0 turns the warps' own; over turns, about one in N.
        let key = warp_key([3, 0, 0], 1);
        assert_eq!(
            turn_sampled(key, 0, Sample::turns(5)),
            warp_sampled([3, 0, 0], 1, Sample::warps(5))
        );
        let drawn = (0..4096).filter(|&t| turn_sampled(key, t, Sample::turns(5))).count();
        assert!(drawn.abs_diff(128) <= 1, "{drawn} of 4096 turns");
        // Spread out: never two turns in a row, and no long run without one.
        let turns: Vec<u32> =
            (0..4096).filter(|&t| turn_sampled(key, t, Sample::turns(5))).collect();
        let gaps = turns.windows(2).map(|w| w[1] - w[0]);
        assert!(gaps.clone().min() > Some(1) && gaps.max() < Some(64), "{turns:?}");
        // Without loops, the copies are as by warps.
        let flat = copies("egpu", &format!("{}\tret;\n", probe(1)), Sample::turns(5));
        assert!(!flat.contains("%egpu_turns") && flat.contains("\t{\n"));
        // Warp-specialised kernels are drawn once; kernels with `wgmma` by turns.
        let once = for_kernel(Sample::turns(5), ["setmaxnreg.inc.sync.aligned.u32"].into_iter());
        assert!(!once.turns);
        assert!(for_kernel(Sample::turns(5), ["wgmma.fence.sync.aligned"].into_iter()).turns);
    }

    /// A loop whose turns start with the warp together (an aligned barrier, a full-warp
    /// `.sync` before the head's first branch) draws with a full-warp vote and a uniform
    /// branch; another draws with a plain branch.
    #[test]
    fn converged_loops_draw_uniformly() {
        let probe = mark("egpu", "$egpu_ws1", "\tPROBE;\n", Sample::turns(5));
        let body = |head: &str| {
            let inner =
                format!("$L0:\n{head}{probe}\tld.global.f32 %f1, [%rd1];\n\t@%p bra $L0;\n");
            copies("egpu", &inner, Sample::turns(5))
        };
        let uniform =
            "\tvote.sync.any.pred %egpu_tq, %egpu_tq, -1;\n\t@%egpu_tq bra.uni $L0_egpus;";
        for head in [
            "\tbar.sync 0;\n",
            "\t.loc 1 2 3\n\tadd.s32 %r1, %r1, 1;\n\tbarrier.sync.aligned 0;\n",
            "\telect.sync %r7|%p7, -1;\n",
            "\twgmma.fence.sync.aligned;\n",
        ] {
            assert!(body(head).contains(uniform), "{head}: {}", body(head));
        }
        for head in [
            "",
            "\tbarrier.sync 0;\n",
            "\t@%p bra $L2;\n$L2:\n\tbar.sync 0;\n",
            "\tshfl.sync.idx.b32 %r1, %r2, 0, 31, %r9;\n",
        ] {
            let b = body(head);
            assert!(!b.contains("vote.sync") && b.contains("@%egpu_tq bra $L0_egpus;"), "{b}");
        }
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
