//! Probes that run as a few register adds: at an access, a probe whose only effect is to add
//! numbers known when instrumenting, or the access's size, to fields of map values looked up by
//! the kernel's id ([`summary`]: `counts` += 1, `bytes` += the size) is not run at all. (A size
//! known at run time only, a `cp.async`'s `src-size` that Triton's masked loads set, is added
//! from its register.) The
//! injector adds the numbers to the thread's sum of each field instead (the registers
//! [`LookupCache::sums`](crate::translate::LookupCache::sums) names, which the probes that do
//! run add to as well), and when the thread exits, one lane of the warp looks the value up (or
//! inserts it) and every lane adds its sums to it ([`exit_lookup`], then the flush of
//! `sums.rs`). A loop's accesses then cost it an add per field and nothing else: no branch, no
//! register holding a value's address.
//!
//! In a kernel without loops (each access runs at most once per thread, as in a kernel that
//! moves one element per thread), the exit is most of a short thread's added work. There the
//! lanes count by the warp instead ([`summaries`]'s `warp`): at each access, the lowest of the
//! lanes running it together adds the count for all of them (`popc` of `activemask`) to its
//! sums, the others nothing, and at the exit each lane adds what it holds, with no reduction:
//! in a warp that ran together, one lane per field, the others skipping the exit's lookup and
//! adds (measured on the H200, `counts` on the one-element saxpy: 1.95× before, 1.71× after).
//! A loop's accesses keep the two register adds: there the exit is paid once for many
//! accesses.
//!
//! The maps end the same as with the probe at every access: the same adds, to the same values,
//! made visible when the kernel completes (as every combined add is); when the map is full
//! and the value cannot be inserted, the thread's adds are dropped, as each one would have been.

use std::collections::{BTreeMap, BTreeSet};

use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MemAccessCtx, Program, assemble};
use egpu_maps::layout::shard;

use super::DeviceProbe;
use super::Names;
use super::access::{Observation, Observed};
use super::sums::{Cached, sum_register};
use crate::ptx::{PieceKind, PtxInstruction, PtxModule};
use crate::translate::{
    Addend, CacheKey, Context, LookupCache, Options, SiteConstants, TranslateError, Translation,
    summary, translate,
};

/// The code that replaces each summarized probe at each access, by (piece, probe index); the
/// maps (by device address) whose values they add to.
#[derive(Default)]
pub(super) struct Summaries {
    pub(super) code: BTreeMap<(usize, usize), String>,
    pub(super) maps: BTreeSet<u64>,
    /// Some add is of a size known at run time only (each lane adds its own).
    pub(super) sized: bool,
    /// The numbers are counted by the warp, and no other add goes to these maps' sums: each
    /// lane flushes its own at the exit.
    pub(super) by_warp: bool,
}

impl Summaries {
    /// The accesses at which some probe runs as adds.
    pub(super) fn pieces(&self) -> usize {
        self.code.keys().map(|(piece, _)| piece).collect::<BTreeSet<_>>().len()
    }

    /// Whether any probe at the access of `piece` runs as adds (such an access is in no run).
    pub(super) fn at(&self, piece: usize) -> bool {
        self.code.range((piece, 0)..=(piece, usize::MAX)).next().is_some()
    }
}

/// A probe (its index) at a kind of access: class, operation, fetch, store, size (`None`: in a
/// register).
type Verdict = (usize, u32, u32, bool, bool, Option<u32>);

/// The summaries of the kernel whose body is `body` in `module`, with its instructions and
/// what each is to the injector (see [`summaries`]; `plain`: the probes of `selected` that are
/// not sampled), counted by the warp where the kernel allows it: on sm_70 and later, no loop
/// repeats an access, no lane adds a size of its own, and no probe that runs adds to the sums.
#[allow(clippy::type_complexity)]
pub(super) fn for_kernel(
    names: &Names,
    (module, body, instructions, observations): (
        &PtxModule,
        std::ops::Range<usize>,
        &[(usize, PtxInstruction<'_>)],
        &[Observation],
    ),
    (selected, plain): (
        &[(usize, &DeviceProbe<'_>, DeviceEvent)],
        &[(usize, &DeviceProbe<'_>, DeviceEvent)],
    ),
    caches: &BTreeMap<u64, Cached>,
    id: u64,
    boxes: bool,
    sm: u32,
) -> Summaries {
    let sum = |warp| summaries(names, instructions, observations, plain, caches, id, boxes, warp);
    let warp = sm >= 70 && loop_free(module, body, instructions);
    let counted = sum(warp);
    let by_warp = warp
        && !counted.sized
        && instructions.iter().zip(observations).all(|((piece, _), o)| {
            let Observation::Observed(o) = o else { return true };
            selected.iter().all(|(i, p, e)| {
                *e != o.event
                    || counted.code.contains_key(&(*piece, *i))
                    || !p.maps.iter().any(|b| counted.maps.contains(&b.addr))
            })
        });
    match (warp, by_warp) {
        (true, false) => sum(false),
        _ => Summaries { by_warp, ..counted },
    }
}

/// The probes of `selected` that run as adds at the accesses of a kernel (whose id is `id`),
/// given its `instructions` and what each is to the injector (`observations`), and the hash
/// maps with lookup caches (`caches`, whose sum registers the adds go to). With `boxes` (a table
/// of tensor map boxes), a tensor copy's size is looked up at run time: its probes run. With
/// `warp`, the numbers known when instrumenting are counted by the warp (see the module's
/// docs), on sm_70 and later.
#[allow(clippy::too_many_arguments)]
fn summaries(
    names: &Names,
    instructions: &[(usize, PtxInstruction<'_>)],
    observations: &[Observation],
    selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)],
    caches: &BTreeMap<u64, Cached>,
    id: u64,
    boxes: bool,
    warp: bool,
) -> Summaries {
    let mut out = Summaries::default();
    let mut verdicts: BTreeMap<Verdict, Option<Vec<(String, Addend)>>> = BTreeMap::new();
    for ((piece, _), observation) in instructions.iter().zip(observations) {
        let Observation::Observed(o) = observation else { continue };
        // A size known at run time only is summed from its register: one copied there by a
        // line of its own (a `cp.async`'s `src-size`), not one looked up (a tensor copy's).
        let size = match &o.size_code {
            None => Some(o.size),
            Some(code) if code.lines().count() == 1 && !code.contains("{ADDR}") => None,
            Some(_) => continue,
        };
        if o.generic || (boxes && o.class == MemAccessCtx::TENSOR_COPY) {
            continue;
        }
        for &(i, p, e) in selected {
            if e != o.event {
                continue;
            }
            let key = (i, o.class, o.op, o.fetch, o.is_store, size);
            let adds = verdicts
                .entry(key)
                .or_insert_with(|| adds(names, p, o, size, caches, id, &mut out.maps));
            if let Some(adds) = adds {
                out.sized |= adds.iter().any(|(_, a)| *a == Addend::Size);
                out.code.insert((*piece, i), code(names, *piece, o, adds, warp));
            }
        }
    }
    out
}

/// The adds that stand for probe `p` at access `o` (of `size`, `None` when in a register), to
/// sum registers, when it can run as adds.
fn adds(
    names: &Names,
    p: &DeviceProbe<'_>,
    o: &Observed,
    size: Option<u32>,
    caches: &BTreeMap<u64, Cached>,
    id: u64,
    maps: &mut BTreeSet<u64>,
) -> Option<Vec<(String, Addend)>> {
    let site = SiteConstants {
        kernel_id: id,
        class: o.class,
        op: o.op,
        fetch: o.fetch,
        is_store: o.is_store,
    };
    let adds = summary(p.program, &site, size)?;
    let mut out = Vec::new();
    let mut used = Vec::new();
    for a in adds {
        let binding = p.maps.get(a.map as usize)?;
        let c = caches.get(&binding.addr)?;
        let offset = u32::try_from(a.offset).ok()?;
        // The exit's lookup inserts zeros from the stack, beside the key (512 bytes).
        let fits = 8 + 8 * c.def.value_size.div_ceil(8) <= 512;
        if a.key != id || !c.by_kernel || !c.one_value || !c.fields.contains(&offset) || !fits {
            return None;
        }
        used.push(binding.addr);
        if a.value != Addend::Const(0) {
            out.push((sum_register(names, c, offset), a.value));
        }
    }
    maps.extend(used);
    Some(out)
}

/// The code of `adds` at access `o` (at `piece`): a register add each, of the size's register
/// (written by the access's size code) where the size is known at run time only; with `warp`,
/// the lowest lane running the access adds the numbers known now times the lanes running it.
fn code(
    names: &Names,
    piece: usize,
    o: &Observed,
    adds: &[(String, Addend)],
    warp: bool,
) -> String {
    let sized = adds.iter().any(|(_, a)| *a == Addend::Size);
    let (size, wide) = (format!("%{}_zs{piece}", names.stem), format!("%{}_zd{piece}", names.stem));
    let mut code = match (&o.size_code, sized) {
        (Some(read), true) => format!(
            "\t{{\n\t.reg .b32 {size};\n\t.reg .b64 {wide};\n{}\tcvt.u64.u32 {wide}, {size};\n",
            read.replace("{SIZE}", &size)
        ),
        _ => String::new(),
    };
    let counted = warp && adds.iter().any(|(_, a)| matches!(a, Addend::Const(_)));
    let r = |what: &str| format!("%{}_z{what}{piece}", names.stem);
    let (lanes, below, lead, count) = (r("m"), r("l"), r("p"), r("c"));
    if counted {
        code.push_str(&format!(
            "\t{{\n\t.reg .b32 {lanes}, {below};\n\t.reg .pred {lead};\n\t.reg .b64 {count};\n\
             \tactivemask.b32 {lanes};\n\tmov.u32 {below}, %lanemask_lt;\n\
             \tand.b32 {below}, {below}, {lanes};\n\tsetp.eq.u32 {lead}, {below}, 0;\n\
             \tpopc.b32 {lanes}, {lanes};\n\tcvt.u64.u32 {count}, {lanes};\n"
        ));
    }
    for (sum, addend) in adds {
        match addend {
            Addend::Const(1) if counted => {
                code.push_str(&format!("\t@{lead} add.u64 {sum}, {sum}, {count};\n"))
            }
            Addend::Const(c) if counted => {
                code.push_str(&format!("\t@{lead} mad.lo.u64 {sum}, {count}, {c}, {sum};\n"))
            }
            Addend::Const(c) => code.push_str(&format!("\tadd.u64 {sum}, {sum}, {c};\n")),
            Addend::Size => code.push_str(&format!("\tadd.u64 {sum}, {sum}, {wide};\n")),
        }
    }
    if counted {
        code.push_str("\t}\n");
    }
    if sized {
        code.push_str("\t}\n");
    }
    code
}

/// Whether every instruction of the kernel whose body holds `instructions` runs at most once per
/// thread: no jump goes back to a label at or before it (nor through a table, `brx.idx`).
pub(super) fn loop_free(
    module: &PtxModule,
    body: std::ops::Range<usize>,
    instructions: &[(usize, PtxInstruction<'_>)],
) -> bool {
    let labels: BTreeMap<&str, usize> = body
        .filter(|&k| module.pieces().get(k).is_some_and(|p| p.kind == PieceKind::Label))
        .map(|k| (module.piece_text(k).trim().trim_end_matches(':').trim_end(), k))
        .collect();
    instructions.iter().all(|(piece, insn)| match insn.base() {
        "bra" => insn.operands.first().and_then(|t| labels.get(t)).is_some_and(|&at| at > *piece),
        "brx" => false,
        _ => true,
    })
}

/// The module-scope variable where a kernel (numbered by `kernel`, unique in the module)
/// remembers the address of its value of cached map `c` ([`exit_lookup`]).
pub(super) fn remembered(names: &Names, kernel: usize, c: &Cached) -> String {
    format!("{}_vp{kernel}_{}", names.stem, c.index)
}

/// The code a thread runs when it exits to find the value of cached map `c` under the kernel's
/// id `id`, into the cache's register (`value`), when any of its sums of that map's fields is
/// not zero; `prefix` starts its names, unique in the module. The address is remembered in the
/// module-scope variable `at` ([`remembered`], zero when the module is loaded): a lane reads it
/// (one load, from the SM's L1 cache once there), and when it is still 0 (or the SM's cache
/// still says so) searches the map itself and writes the address there. On sm_70 and later
/// each lane does so on its own, not one lane for its warp: the lanes that parted in a probe
/// need not come together again at the exit, and a warp whose groups each elected a lane to
/// search and passed its answer with `shfl.sync` lost the counts of one group now and then on
/// the H200 (the `hot` kernel of `mem_timing.cu` under `counts,pages`: 30 lanes' loads, or a
/// few lanes' atomics, in 4 runs of 8, with no refused insert counted; none with the lanes
/// brought together before the exit, none in 8 runs with each lane on its own). A warp's
/// searches run together anyway, and only the first warps search. The value is inserted
/// (zeros) when missing; when the map is full, the register stays 0, the flush adds nothing,
/// and the lane counts a refused insert in the map's shard header (the recording says the map
/// was full: nothing is lost unsaid). A value's address never changes while the module is
/// loaded: a device part's entries are never removed nor moved.
pub(super) fn exit_lookup(
    names: &Names,
    c: &Cached,
    id: u64,
    (prefix, at): (&str, &str),
    sm: u32,
) -> Result<Translation, TranslateError> {
    let value = format!("%{}_hp{}", names.stem, c.index);
    let mut options = Options::new(prefix, Context::Kernel { kernel_id: id });
    options.maps = vec![c.map];
    options.sm = sm;
    options.lookup_cache = vec![Some(LookupCache {
        key: CacheKey::Constant(id),
        value: value.clone(),
        sums: Vec::new(),
        previous: None,
        counts: None,
    })];
    let program = lookup_program(&c.def, id).ok_or_else(|| TranslateError::MapUse {
        pc: 0,
        name: c.def.name.clone(),
        why: "its value is too large to insert from a thread's stack".into(),
    })?;
    let mut t = translate(&program, &options)?;
    let sums: Vec<String> = c.fields.iter().map(|&o| sum_register(names, c, o)).collect();
    let r = |what: &str| format!("%{prefix}_x{what}");
    // (PTX takes no immediate address but a local one: the refused count's is in a register.)
    let refused = c.map.addr + (c.map.geometry.shard_offset(0) + shard::REFUSED) as u64;
    let (nz, known, done) = (r("nz"), r("known"), format!("${prefix}_xdone"));
    let any_sum = |nz: &str| {
        let mut code = format!("\tsetp.ne.u64 {nz}, {}, 0;\n", sums[0]);
        for s in &sums[1..] {
            code.push_str(&format!("\tsetp.ne.or.u64 {nz}, {s}, 0, {nz};\n"));
        }
        code
    };
    if sm >= 70 {
        // Each lane on its own (see the docs): it reads the variable, and searches when it
        // finds nothing there.
        let mut code = format!("\t{{\n\t.reg .pred {nz}, {known};\n\t.reg .b64 %{at}_r;\n");
        code.push_str(&any_sum(&nz));
        code.push_str(&format!(
            "\t@!{nz} bra {done};\n\tld.global.u64 %{at}_r, [{at}];\n\
             \tsetp.ne.u64 {known}, %{at}_r, 0;\n\t@{known} mov.b64 {value}, %{at}_r;\n\
             \t@{known} bra {done};\n"
        ));
        code.push_str(&t.body);
        code.push_str(&format!(
            "\tsetp.ne.u64 {known}, {value}, 0;\n\t@{known} st.global.u64 [{at}], {value};\n\
             \t@{known} bra {done};\n\tmov.b64 %{at}_r, {refused};\n\
             \tred.global.add.u64 [%{at}_r], 1;\n{done}:\n\t}}\n"
        ));
        t.body = code;
        return Ok(t);
    }
    // Before sm_70 a warp's lanes run in lockstep: one searches for all (lanes of one warp
    // inserting one key would wait on each other), and the others take its answer.
    let (lanes, lt, leader, lo, hi) = (r("lanes"), r("lt"), r("leader"), r("lo"), r("hi"));
    let (any, lead) = (r("any"), r("lead"));
    let mut code = format!(
        "\t{{\n\t.reg .b32 {lanes}, {lt}, {leader}, {lo}, {hi};\n\
         \t.reg .pred {nz}, {any}, {lead}, {known};\n\t.reg .b64 %{at}_r;\n\
         \tactivemask.b32 {lanes};\n"
    );
    code.push_str(&any_sum(&nz));
    let skip = format!("${prefix}_xskip");
    code.push_str(&format!(
        "\tvote.sync.any.pred {any}, {nz}, {lanes};\n\t@!{any} bra {done};\n\
         \tld.global.u64 %{at}_r, [{at}];\n\tsetp.ne.u64 {known}, %{at}_r, 0;\n\
         \tvote.sync.all.pred {known}, {known}, {lanes};\n\
         \t@{known} mov.b64 {value}, %{at}_r;\n\t@{known} bra {done};\n\
         \tmov.u32 {lt}, %lanemask_lt;\n\tand.b32 {lt}, {lt}, {lanes};\n\
         \tsetp.eq.u32 {lead}, {lt}, 0;\n\t@!{lead} bra {skip};\n"
    ));
    code.push_str(&t.body);
    code.push_str(&format!(
        "\tsetp.ne.u64 {known}, {value}, 0;\n\t@{known} st.global.u64 [{at}], {value};\n"
    ));
    // Found nothing (the map full): the lanes' sums are left out, and the group's lowest lane
    // counts a refused insert in the map's shard, which the recording reports.
    code.push_str(&format!(
        "{skip}:\n\tbrev.b32 {leader}, {lanes};\n\tbfind.shiftamt.u32 {leader}, {leader};\n\
         \tmov.b64 {{{lo}, {hi}}}, {value};\n\
         \tshfl.sync.idx.b32 {lo}, {lo}, {leader}, 31, {lanes};\n\
         \tshfl.sync.idx.b32 {hi}, {hi}, {leader}, 31, {lanes};\n\
         \tmov.b64 {value}, {{{lo}, {hi}}};\n\
         \tsetp.eq.u64 {known}, {value}, 0;\n\tand.pred {known}, {known}, {lead};\n\
         \t@!{known} bra {done};\n\tmov.b64 %{at}_r, {refused};\n\
         \tred.global.add.u64 [%{at}_r], 1;\n{done}:\n\t}}\n"
    ));
    t.body = code;
    Ok(t)
}

/// The program that looks the kernel's value of a map declared as `def` up, inserting zeros
/// when it is missing, as Probe Rust's `fetch_add_field` does.
fn lookup_program(def: &MapDef, id: u64) -> Option<Verified> {
    let words = def.value_size.div_ceil(8);
    let value_at = 8 + 8 * words;
    let mut text = format!(
        "lddw %r1, {id:#x}\nstxdw [%r10-8], %r1\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\n\
         call 1\njne %r0, 0, out\n"
    );
    for w in 1..=words {
        text.push_str(&format!("stdw [%r10-{}], 0\n", 8 + 8 * w));
    }
    text.push_str(&format!(
        "lddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\nmov %r3, %r10\nadd %r3, -{value_at}\n\
         mov %r4, 1\ncall 2\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\ncall 1\n\
         out:\nmov %r0, 0\nexit"
    ));
    let program = Program::new(
        assemble(&text).ok()?,
        vec![def.clone()],
        AttachPoint::Device(DeviceEvent::KernelExit),
    )
    .ok()?;
    verify(&program).ok()
}
