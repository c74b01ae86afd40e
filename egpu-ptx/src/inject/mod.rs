//! The injector: splices translated probes into a module's PTX, at the device attach points.
//!
//! [`inject`] reads the module with the [PTX reader](crate::ptx), finds the attach points of
//! every selected kernel, translates each probe once per site (so each copy has its own names and
//! its site's constants), and writes the module back with the probes inserted between the
//! original pieces. Everything else stays byte for byte as it was, `.version` and `.target`
//! included. Probes never write the original program's registers, predicates or labels: every
//! name they declare starts with `egpu` and a site number, inside a `{ }` block of its own.
//!
//! | attach point | where the probe runs | its context |
//! |---|---|---|
//! | [`KernelEntry`](DeviceEvent::KernelEntry) | first thing in each kernel | [`KernelCtx`](egpu_ebpf::KernelCtx) |
//! | [`KernelExit`](DeviceEvent::KernelExit) | before every `ret` and `exit` of a kernel | [`KernelCtx`](egpu_ebpf::KernelCtx) |
//! | [`GlobalLoad`](DeviceEvent::GlobalLoad) | at every read of global memory (before it; just after a bulk or tensor copy): `ld.global` and `ldu.global` (any qualifiers: `.nc`, cache hints, vectors), generic `ld` and `ldu` whose address is global at run time, `cp.async`, and `cp.async.bulk` and tensor copies into shared memory | [`MemAccessCtx`] |
//! | [`GlobalStore`](DeviceEvent::GlobalStore) | at every write (before it; just after a bulk or tensor copy): `st.global` and generic `st`, `cp.async.bulk` and tensor copies from shared memory, their reductions (`cp.reduce.async.bulk`), and writes of tensor maps (`tensormap.cp_fenceproxy`, `tensormap.replace.global`) | [`MemAccessCtx`] |
//! | [`GlobalAtomic`](DeviceEvent::GlobalAtomic) | before every `atom` and `red` on global memory, generic ones whose address is global at run time | [`MemAccessCtx`] |
//!
//! The context's `class` says which kind of instruction fired ([`MemAccessCtx::class`]), `size`
//! the bytes it moves (at run time for a copy whose size is a register; the bytes `cp.async`
//! reads, 0 when its `ignore-src` holds; for a tensor copy, whose `addr` is its tensor map's,
//! the bytes of the map's box when the context's table of boxes knows the map
//! ([`InjectOptions::tensor_boxes`], [`tensor_maps`]), else 0), and `op` an atomic's or reduction's operation. A bulk
//! or tensor copy fires once, in the thread that issues it.
//!
//! A guarded instruction (`@%p ld.global …`) runs its probe only when the guard holds. In a
//! run of accesses in straight-line code, a probe that only adds the access's size to map
//! values ([`batchable`](crate::translate::batchable)) runs once, at the run's last access, with
//! the run's total (`runs.rs`): the maps end the same. A probe whose only effect at an access
//! of known size is adding numbers known then to the kernel's value (a count, the bytes) does
//! not run there at all: the numbers go to the thread's sums (`summaries.rs`). Accesses
//! inside device functions (`.func`) are observed too, with the function's own name as the kernel
//! id. Every instruction is judged by the PTX ISA's table ([`crate::ptx::memops`]):
//! [`Injection::memory_instructions`] counts the global memory instructions of the module,
//! [`Injection::observed`] those that fire an attach point, and [`Injection::unobserved`] lists
//! the others with why: texture, surface, multimem and `wmma` accesses, opcodes the table does
//! not know, and accesses whose address is a plain number. Hints that move
//! no data (`prefetch`, `discard`, `applypriority`) are not global memory instructions.
//!
//! [`MemAccessCtx::class`]: egpu_ebpf::MemAccessCtx::class

use std::collections::BTreeMap;

use egpu_ebpf::{AttachPoint, DeviceEvent, MemAccessCtx, kernel_id};

mod access;
mod api;
mod deferred;
mod helpers;
mod injection;
mod invariants;
mod launch_tags;
mod occupancy;
mod runs;
mod sampled;
mod summaries;
mod sums;
pub mod tensor_maps;

use access::{Observation, Observed, observe, wrap_access};
pub use api::{DeviceProbe, InjectError, InjectOptions, Kernels};
use helpers::{Names, access_context, ends_path, predicates, zeroed};
pub use injection::{Coverage, Injection, Site, Unobserved};
pub use launch_tags::{LaunchParam, LaunchParamError};
pub use occupancy::blocks_per_sm;
pub use sampled::{Sample, WarpSampling, turn_sampled, warp_key, warp_sampled};

use crate::ptx::{FunctionKind, PieceKind, PtxModule};
use crate::translate::{CacheKey, Context, Defer, LookupCache, Options, combines, translate};
use deferred::{Deferrals, Pending};
use sums::{
    COUNT_REGISTERS, Cached, close_batches, converged, drained_rings, flush, lookup_caches,
    ring_registers, sum_register,
};

/// Probed memory accesses in a kernel past which its probes share the hash map searches
/// ([`Options::outline`]): a few hundred instructions each, which inline would make a large
/// kernel's code megabytes long, slow to compile and too big for the instruction cache.
pub const OUTLINE_SITES: usize = 16;

/// Instruments `ptx` with `probes`.
pub fn inject(ptx: &str, probes: &[DeviceProbe<'_>]) -> Result<Injection, InjectError> {
    inject_with(ptx, probes, &InjectOptions::default())
}

/// Instruments `ptx` with `probes`, as `options` say.
pub fn inject_with(
    ptx: &str,
    probes: &[DeviceProbe<'_>],
    options: &InjectOptions,
) -> Result<Injection, InjectError> {
    let module = PtxModule::parse(ptx)?;
    if let Some(size) = module.directive(".address_size")
        && size != "64"
    {
        return Err(InjectError::AddressSize(size.to_owned()));
    }
    // `.target sm_90a, debug`: the SM version, 90 (the GPU machine's) when unreadable.
    let sm = module.target().map_or(90, |(_, sm)| sm);
    for (i, p) in probes.iter().enumerate() {
        let attach = p.program.program().attach_point();
        if !attach.is_device() {
            return Err(InjectError::NotDevice { probe: i, attach });
        }
    }
    let mut before: BTreeMap<usize, String> = BTreeMap::new();
    let mut after: BTreeMap<usize, String> = BTreeMap::new();
    let mut functions = String::new();
    // Module-scope variables: where each kernel's values of the maps its probes run as adds
    // are remembered (`summaries.rs`).
    let mut globals = String::new();
    let mut shared = BTreeMap::new();
    let mut sites = Vec::new();
    let mut serial = 0usize;
    let names = Names::new(ptx);
    let (mut unobserved, mut uncovered) = (Vec::new(), Vec::new());
    let (mut memory_instructions, mut observed, mut hints) = (0, 0, 0);
    let (mut runs, mut in_runs, mut summarized) = (0, 0, 0);
    let is_predicate = predicates(&module);
    // Kernels copied for sampled warps: their body's `{`, its `}` and the pieces declared once.
    let mut copied: BTreeMap<usize, (usize, Vec<usize>, Sample)> = BTreeMap::new();
    let sample = options.sampled.as_ref().map_or(Sample::EVERY, |s| s.sample);
    let sm_clock_khz = options.sm_clock_khz;
    let mut deferrals = Deferrals::new(&names.stem);
    // Kernels' headers given the launch's parameter (`launch_tags.rs`), and where it is.
    let mut headers: BTreeMap<usize, String> = BTreeMap::new();
    let mut launch_params = Vec::new();
    let param_limit = launch_tags::param_limit(module.directive(".version"), sm);
    for f in module.functions() {
        let mut index = 0u32;
        let id = kernel_id(&f.name);
        let selected: Vec<(usize, &DeviceProbe<'_>, DeviceEvent)> = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kernels.selects(&f.name))
            .filter_map(|(i, p)| match p.program.program().attach_point() {
                AttachPoint::Device(e) => Some((i, p, e)),
                _ => None,
            })
            .collect();
        if selected.is_empty() {
            continue;
        }
        let entry = f.kind == FunctionKind::Entry;
        // The launch's tag, in a register loaded from the parameter appended to the kernel.
        let tag = if entry
            && options.launch_tags
            && selected.iter().any(|(_, p, _)| launch_tags::reads_tag(p.program))
        {
            let (param, register) = (format!("{}_tag_param", names.stem), names.tag.clone());
            let header = module.piece_text(f.header);
            let (text, at) = launch_tags::append(header, &f.name, &param, param_limit)
                .map_err(|why| InjectError::LaunchParam { kernel: f.name.clone(), why })?;
            headers.insert(f.header, text);
            launch_params.push(at);
            after.entry(f.body.start).or_default().push_str(&launch_tags::load(&register, &param));
            Some(register)
        } else {
            None
        };
        // Probes sampled by warps, here: each marked where it runs (`sampled.rs`).
        let sampled_here: Vec<usize> = (selected.iter().map(|s| s.0))
            .filter(|i| options.sampled.as_ref().is_some_and(|s| s.probes.contains(i)))
            .collect();
        let is_sampled = |i: usize| sampled_here.contains(&i);
        let instructions = module.instructions(f);
        let sample = sampled::for_kernel(sample, instructions.iter().map(|i| i.1.opcode));
        let stem = names.stem.clone();
        let mark = move |i: usize, label: String, code: String| match is_sampled(i) {
            true => sampled::mark(&stem, &label, &code, sample),
            false => code,
        };
        let copy =
            (entry && !sampled_here.is_empty()).then(|| sampled::hoisted(&module, f)).flatten();
        let caches = if entry { lookup_caches(&selected) } else { BTreeMap::new() };
        let rings = if entry { drained_rings(&selected, sm) } else { BTreeMap::new() };
        // Not in a kernel without loops, whose probes run at most once per thread anyway.
        let hoist = entry && !summaries::loop_free(&module, f.body.clone(), &instructions);
        let words = if hoist { invariants::for_kernel(&selected, &names.stem) } else { vec![] };
        // Counts by page in registers, in loops (`Counts`), where the sums cost no block per SM.
        let registers = options.registers.get(&f.name).copied();
        let counted = hoist
            && sm >= 80
            && occupancy::room_for(module.piece_text(f.header), registers, COUNT_REGISTERS, sm);
        // Per-thread combining of atomic adds needs kernel-wide registers: kernels only. Adds to
        // a hash map's values combine when its values stay put (the maps with a lookup cache).
        // Misses kept for the straight line's end: kernels with counts, none copied for sampled
        // warps (a copy's labels would meet the other's).
        deferrals.begin(options.defer_misses && counted && sampled_here.is_empty());
        let combine = entry
            && selected.iter().any(|(_, p, _)| {
                let stable =
                    |m: u32| p.maps.get(m as usize).is_some_and(|b| caches.contains_key(&b.addr));
                combines(p.program, &stable)
            });
        // The registers the kernel was compiled to, kept (its blocks per SM with them).
        let bound = !options.bound_sampled_only || copy.is_some();
        if let (true, true, Some(&registers)) = (entry, bound, options.registers.get(&f.name)) {
            let moves = instructions.iter().any(|(_, i)| i.opcode.starts_with("setmaxnreg"));
            let header = module.piece_text(f.header);
            if let Some(line) = occupancy::limit(header, moves, registers, sm) {
                before.entry(f.body.start).or_default().push_str(&line);
            }
        }
        // What each instruction is to the injector, judged once.
        let observations: Vec<Observation> =
            instructions.iter().map(|(_, insn)| observe(insn, &is_predicate)).collect();
        // Probes that run as adds (see `summaries`), and runs of accesses whose probes run
        // once (see `runs`), added up in one register.
        let summed = if combine {
            let boxes = options.tensor_boxes.is_some();
            // A sampled probe runs where it is, in the sampled warps only.
            let plain: Vec<_> = selected.iter().filter(|s| !is_sampled(s.0)).copied().collect();
            let kernel =
                (&module, f.body.clone(), instructions.as_slice(), observations.as_slice());
            summaries::for_kernel(&names, kernel, (&selected, &plain), &caches, id, boxes, sm)
        } else {
            summaries::Summaries::default()
        };
        let roles = match sampled_here.is_empty() {
            true => {
                runs::runs(&module, &instructions, &observations, &selected, id, &|p| summed.at(p))
            }
            false => BTreeMap::new(),
        };
        // The function's header piece: unique in the module.
        let kernel_index = f.header;
        for cached in caches.values().filter(|c| summed.maps.contains(&c.map.addr)) {
            let name = summaries::remembered(&names, kernel_index, cached);
            globals.push_str(&format!(".global .align 8 .u64 {name};\n"));
        }
        let total = format!("%{}_run", names.stem);
        if !roles.is_empty() {
            after
                .entry(f.body.start)
                .or_default()
                .push_str(&format!("\t.reg .b32 {total};\n\tmov.u32 {total}, 0;\n"));
        }
        // The tensor maps that are kernel parameters, and the register of each one's bytes.
        let param_maps = tensor_maps::ParamMaps::new(module.piece_text(f.header), &instructions);
        let mut known_boxes: BTreeMap<(&str, i64), String> = BTreeMap::new();
        let mut batched = Vec::new();
        let adds = roles.values().filter(|r| **r == runs::Role::Adds).count();
        runs += roles.len() - adds;
        in_runs += roles.len();
        summarized += summed.pieces();
        // A kernel with many copies of probes shares the hash map searches (Options::outline).
        let probed = observations
            .iter()
            .filter(|o| match o {
                Observation::Observed(o) => selected.iter().any(|(_, _, e)| *e == o.event),
                _ => false,
            })
            .count()
            .saturating_sub(adds);
        let outline = (probed > OUTLINE_SITES).then(|| format!("{}h", names.stem));
        let combine_regs = names.sums.clone();
        let cache = |c: &Cached| LookupCache {
            key: if c.by_kernel {
                CacheKey::Constant(id)
            } else if c.map.geometry.key_size <= 8 {
                CacheKey::Register(format!("%{}_hk{}", names.stem, c.index))
            } else if c.kernel_first {
                CacheKey::Second { first: id, second: format!("%{}_hk{}", names.stem, c.index) }
            } else {
                CacheKey::Nothing
            },
            value: format!("%{}_hp{}", names.stem, c.index),
            sums: if combine && c.one_value {
                c.fields.iter().map(|&o| (o, sum_register(&names, c, o))).collect()
            } else {
                Vec::new()
            },
            // The (kernel, page) keys of `pages`: a loop's pages of `x` and `y` alternate.
            previous: (!c.by_kernel && c.map.geometry.key_size > 8 && c.kernel_first).then(|| {
                (format!("%{}_hq{}", names.stem, c.index), format!("%{}_hv{}", names.stem, c.index))
            }),
            counts: sums::counts(&names, c, counted),
        };
        let first_site = sites.len();
        // A probe's code at a site (registered, unless `None`: a deferred access's probe run
        // again), and whether it deferred its miss to `defer`.
        let mut emit = |probe: usize,
                        p: &DeviceProbe<'_>,
                        context: Context,
                        site: Option<Site>,
                        defer: Option<Defer>|
         -> Result<(String, bool), InjectError> {
            let prefix = format!("{}{serial}", names.stem);
            serial += 1;
            let mut options = Options::new(prefix, context);
            options.sm_clock_khz = sm_clock_khz;
            options.pid = std::process::id();
            options.maps = p.maps.to_vec();
            options.sm = sm;
            // A kernel's entry and exit run once per thread: nothing to combine there, and a
            // sum kept from the entry would hold registers through the whole kernel.
            if combine && matches!(options.context, Context::Access { .. }) {
                options.combine = Some(combine_regs.clone());
            }
            if entry {
                options.smid = Some(names.smid.clone());
            }
            options.tag = tag.clone();
            options.lookup_cache = p.maps.iter().map(|b| caches.get(&b.addr).map(cache)).collect();
            // Rings' tickets by the batch at accesses only: a probe at a kernel's entry or exit
            // runs once per thread, and a batch of 32 for one record would take 32 tickets.
            if matches!(options.context, Context::Access { .. }) {
                options.ring_batches = (p.maps.iter())
                    .map(|b| rings.get(&b.addr).map(|&(i, _)| ring_registers(&names, i)))
                    .collect();
            }
            options.outline = outline.clone();
            options.invariants = invariants::of(p, &words);
            options.defer = defer;
            let mut t = translate(p.program, &options)
                .map_err(|error| InjectError::Translate { probe, error })?;
            shared.append(&mut t.shared);
            functions.push_str(&t.functions);
            sites.extend(site);
            // A deferred miss leaves no lanes apart at the access: nothing to converge.
            match t.deferred {
                true => Ok((t.body, true)),
                false => Ok((converged(&options.prefix, t.body, sm), false)),
            }
        };
        if entry {
            // The SM a thread runs on never changes: read it once.
            let smid = &names.smid;
            after
                .entry(f.body.start)
                .or_default()
                .push_str(&format!("\n\t.reg .b32 {smid};\n\tmov.u32 {smid}, %smid;\n"));
            after.entry(f.body.start).or_default().push_str(&invariants::loads(&words));
        }
        for c in caches.values().map(cache) {
            let mut regs = Vec::new();
            match c.key {
                CacheKey::Register(key) | CacheKey::Second { second: key, .. } => regs.push(key),
                CacheKey::Nothing => continue,
                CacheKey::Constant(_) => {}
            }
            regs.push(c.value);
            regs.extend(c.sums.into_iter().map(|(_, r)| r));
            regs.extend(c.previous.into_iter().flat_map(|(k, v)| [k, v]));
            regs.extend(c.counts.into_iter().flat_map(|k| [k.last, k.previous]));
            after.entry(f.body.start).or_default().push_str(&zeroed(&regs));
        }
        for &(i, _) in rings.values() {
            after.entry(f.body.start).or_default().push_str(&zeroed(&ring_registers(&names, i)));
        }
        if combine {
            after.entry(f.body.start).or_default().push_str(&zeroed(&names.sums));
        }
        if f.kind == FunctionKind::Entry {
            let open = f.body.start;
            for &(i, p, e) in &selected {
                if e != DeviceEvent::KernelEntry {
                    continue;
                }
                let site = Site {
                    function: f.name.clone(),
                    line: module.pieces()[open].line,
                    event: e,
                    size: 0,
                    class: 0,
                    index: 0,
                };
                let (body, _) = emit(i, p, Context::Kernel { kernel_id: id }, Some(site), None)?;
                let body = mark(i, format!("${}_we{i}", names.stem), body);
                after.entry(open).or_default().push_str(&format!("\n{body}"));
            }
        }
        // A kernel whose last instruction does not end its path falls off its end: an exit too.
        // So does one whose last instruction is followed by a label (a jump there reaches the end).
        let last = instructions.last().map_or(f.body.start, |(piece, _)| *piece);
        let label_after =
            (last + 1..f.body.end).any(|k| module.pieces()[k].kind == PieceKind::Label);
        let falls_off =
            entry && (label_after || instructions.last().is_none_or(|(_, i)| !ends_path(i)));
        type Emit<'e> = dyn FnMut(
                usize,
                &DeviceProbe<'_>,
                Context,
                Option<Site>,
                Option<Defer>,
            ) -> Result<(String, bool), InjectError>
            + 'e;
        let exit_code = |emit: &mut Emit<'_>,
                         code: &mut String,
                         line: usize,
                         piece: usize|
         -> Result<(), InjectError> {
            for cached in caches.values().filter(|c| summed.maps.contains(&c.map.addr)) {
                // The values the probes that ran as adds never looked up.
                let prefix = format!("{}x{piece}_{}", names.stem, cached.index);
                let at = summaries::remembered(&names, kernel_index, cached);
                let t = summaries::exit_lookup(&names, cached, id, (&prefix, &at), sm)
                    .map_err(|error| InjectError::Translate { probe: 0, error })?;
                code.push_str(&t.body);
            }
            if combine {
                for slot in 0..2 {
                    let (addr, sum) = (&names.sums[2 * slot], &names.sums[2 * slot + 1]);
                    let label = format!("${}_flush{piece}_{slot}", names.stem);
                    code.push_str(&flush(&names, (addr, 0), sum, &label, sm, (None, false, false)));
                }
            }
            for cached in caches.values() {
                let c = cache(cached);
                // Sums counted by the warp are added by each lane: the lanes that led.
                let by_lane = summed.by_warp && summed.maps.contains(&cached.map.addr);
                // The kernel id's value, the same in every lane; the counts' values by lane.
                let counted = c.counts.iter().zip(&c.previous).flat_map(|(k, (_, pv))| {
                    [(&c.value, k.field, &k.last), (pv, k.field, &k.previous)]
                });
                let summed = c.sums.iter().map(|(offset, sum)| (&c.value, *offset, sum));
                for (addr, offset, sum) in summed.chain(counted.clone()) {
                    let label = format!("${}_flush{piece}_{}", names.stem, &sum[1..]);
                    let uniform = !counted.clone().any(|(_, _, s)| s == sum);
                    let to = (Some(cached.map), by_lane, uniform);
                    code.push_str(&flush(&names, (addr, offset), sum, &label, sm, to));
                }
            }
            // The exit probes last: a clock read there (the `timing` set's) comes after the
            // thread's own work at its exit (measured: a 7.6 µs kernel's end read before its
            // lookups and flushes was more than 5% early against CUDA events). Only the rings'
            // batches are closed after them.
            for &(i, p, e) in &selected {
                if e == DeviceEvent::KernelExit {
                    let site = Site {
                        function: f.name.clone(),
                        line,
                        event: e,
                        size: 0,
                        class: 0,
                        index: 0,
                    };
                    let (body, _) =
                        emit(i, p, Context::Kernel { kernel_id: id }, Some(site), None)?;
                    code.push_str(&mark(i, format!("${}_wx{piece}_{i}", names.stem), body));
                }
            }
            code.push_str(&close_batches(&names, &rings, &format!("${}_rb{piece}", names.stem)));
            Ok(())
        };
        // A deferred access's probe, run again from its slot at its run's end.
        let again = |emit: &mut Emit<'_>, d: &Pending, addr: &str, size: &str| {
            let context = access_context(&d.observed, id, addr, size, d.index);
            emit(d.probe, &probes[d.probe], context, None, None).map(|(body, _)| body)
        };
        let mut previous: Option<usize> = None;
        for ((piece, insn), observation) in instructions.iter().zip(observations) {
            let piece = *piece;
            let mut code = String::new();
            // The straight line ends at a label, a branch, a call or a return.
            let label = previous.and_then(|p| {
                (p + 1..piece).find(|&k| module.pieces()[k].kind == PieceKind::Label)
            });
            previous = Some(piece);
            let ends = matches!(insn.base(), "bra" | "brx" | "call" | "ret" | "exit" | "trap");
            if let Some(at) = label.or(ends.then_some(piece)) {
                let check = deferrals.end(|d, addr, size| again(&mut emit, d, addr, size))?;
                before.entry(at).or_default().push_str(&check);
            }
            let is_return = insn.is_return() && entry;
            let observed = match observation {
                Observation::None => None,
                Observation::Hint => {
                    hints += 1;
                    None
                }
                Observation::Unobserved(class, reason) => {
                    memory_instructions += 1;
                    unobserved.push(Unobserved {
                        function: f.name.clone(),
                        line: insn.line,
                        opcode: insn.opcode.to_owned(),
                        class,
                        reason,
                    });
                    None
                }
                Observation::Observed(mut o) => {
                    memory_instructions += 1;
                    observed += 1;
                    if let (MemAccessCtx::TENSOR_COPY, Some(table)) =
                        (o.class, options.tensor_boxes)
                    {
                        // In a kernel, a map that is a parameter is looked up when it starts.
                        let param = o.tensor_map.as_deref().filter(|_| entry);
                        let known = param.and_then(|r| param_maps.param(r)).map(|key| {
                            let next = known_boxes.len();
                            known_boxes
                                .entry(key)
                                .or_insert_with(|| {
                                    let known = format!("%{}_tb{next}", names.stem);
                                    let code =
                                        tensor_maps::param_lookup_code(table, key.0, key.1, &known);
                                    after.entry(f.body.start).or_default().push_str(&code);
                                    known
                                })
                                .clone()
                        });
                        o.size_code = Some(match known {
                            Some(known) => format!("\tmov.u32 {{SIZE}}, {known};\n"),
                            None => tensor_maps::lookup_code(table),
                        });
                    }
                    Some(o)
                }
            };
            // Every observed access has its index, whatever probes are attached.
            let this = index;
            if observed.is_some() {
                index += 1;
            }
            if is_return {
                exit_code(&mut emit, &mut code, insn.line, piece)?;
            }
            if let Some(o) = &observed {
                let role = roles.get(&piece).copied();
                if role.is_some() {
                    code.push_str(&runs::add_size(o, &total));
                }
                let last = Observed {
                    size_code: Some(format!("\tmov.u32 {{SIZE}}, {total};\n")),
                    ..o.clone()
                };
                let o = if role == Some(runs::Role::Last) { &last } else { o };
                let site = |event| Site {
                    function: f.name.clone(),
                    line: insn.line,
                    event,
                    size: o.size,
                    class: o.class,
                    index: this,
                };
                let mut covered = false;
                for &(i, p, e) in &selected {
                    if e != o.event {
                        continue;
                    }
                    covered = true;
                    if let Some(adds) = summed.code.get(&(piece, i)) {
                        code.push_str(adds);
                        batched.push(site(e));
                        continue;
                    }
                    if role == Some(runs::Role::Adds) {
                        // Its probes run at the run's last access.
                        batched.push(site(e));
                        continue;
                    }
                    let addr = format!("%{}_addr{piece}_{i}", names.stem);
                    let size = format!("%{}_size{piece}_{i}", names.stem);
                    let context = access_context(o, id, &addr, &size, this);
                    let offer = deferrals.offer();
                    let (body, deferred) = emit(i, p, context, Some(site(e)), offer)?;
                    if deferred {
                        let observed = o.clone();
                        deferrals.taken(Pending { probe: i, observed, index: this });
                    }
                    let label = format!("${}_skip{piece}_{i}", names.stem);
                    let body = wrap_access(o, &addr, &size, &body, &label);
                    code.push_str(&mark(i, format!("${}_ws{piece}_{i}", names.stem), body));
                }
                if !covered {
                    uncovered.push(site(o.event));
                }
                if role == Some(runs::Role::Last) {
                    code.push_str(&format!("\tmov.u32 {total}, 0;\n"));
                }
            }
            if code.is_empty() {
                continue;
            }
            let block = match &insn.guard {
                None => code,
                Some(g) => {
                    let skip = format!("${}_skip{piece}", names.stem);
                    let bang = if g.negated { "" } else { "!" };
                    format!("\t@{bang}{} bra {skip};\n{code}{skip}:\n", g.predicate)
                }
            };
            // A bulk or tensor copy's probes run just after it: it writes no register, so their
            // operands are the same, and the copy stays next to the `elect.sync` that guards it,
            // which ptxas issues from the uniform datapath (before it, a divergent branch
            // around the probes made it wait on its scoreboard in the TMA matmul's loop).
            let copy = observed.as_ref().is_some_and(|o| {
                matches!(o.class, MemAccessCtx::TENSOR_COPY | MemAccessCtx::BULK_COPY)
            });
            if copy {
                after.entry(piece).or_default().push_str(&format!("\n{block}"));
            } else {
                before.entry(piece).or_default().push_str(&block);
            }
        }
        let close = f.body.end - 1;
        let check = deferrals.end(|d, addr, size| again(&mut emit, d, addr, size))?;
        before.entry(close).or_default().push_str(&check);
        if falls_off {
            let mut code = String::new();
            exit_code(&mut emit, &mut code, module.pieces()[close].line, close)?;
            before.entry(close).or_default().push_str(&code);
        }
        before.entry(close).or_default().push_str(&deferrals.stubs());
        after.entry(f.body.start).or_default().push_str(&deferrals.declarations());
        if let Some(hoisted) = copy {
            copied.insert(f.body.start, (f.body.end - 1, hoisted, sample));
        }
        // In the order of the module's lines (the accesses of a run wait for its last).
        sites.extend(batched);
        sites[first_site..].sort_by_key(|s| s.line);
    }
    let mut out = String::with_capacity(ptx.len() * 2);
    let first_function = module.functions().first().map(|f| f.header);
    // A piece as written: the code before it, its text, the code after it.
    let written = |i: usize| {
        let mut out = String::new();
        if let Some(code) = before.get(&i) {
            out.push('\n');
            out.push_str(code);
            if module.pieces()[i].kind == PieceKind::Statement {
                out.push('\t');
            }
        }
        out.push_str(headers.get(&i).map_or(module.piece_text(i), String::as_str));
        if let Some(code) = after.get(&i) {
            out.push_str(code);
        }
        out
    };
    let mut next = 0;
    for i in 0..module.pieces().len() {
        if i < next {
            continue;
        }
        if Some(i) == first_function && !globals.is_empty() {
            out.push_str(&globals);
        }
        if Some(i) == first_function && !(functions.is_empty() && shared.is_empty()) {
            for f in shared.values() {
                out.push_str(f);
            }
            out.push_str(&functions);
            out.push('\n');
        }
        let Some((close, hoisted, sample)) = copied.get(&i) else {
            out.push_str(&written(i));
            continue;
        };
        // The kernel's `{`, then its body twice (`sampled.rs`), each copy with what runs
        // first and registers of its own: a sum held through one copy is not spilled
        // because the other lacks registers.
        out.push_str(&before.get(&i).map_or(String::new(), |c| format!("\n{c}")));
        out.push_str(module.piece_text(i));
        let mut inner = after.get(&i).cloned().unwrap_or_default();
        for k in i + 1..*close {
            match hoisted.contains(&k) {
                true => out.push_str(&format!("\n\t{}", module.piece_text(k))),
                false => inner.push_str(&written(k)),
            }
        }
        inner.push_str(before.get(close).map_or("", String::as_str));
        out.push_str(&sampled::copies(&names.stem, &inner, *sample));
        out.push_str(module.piece_text(*close));
        out.push_str(after.get(close).map_or("", String::as_str));
        next = close + 1;
    }
    Ok(Injection {
        ptx: out,
        sites,
        memory_instructions,
        observed,
        unobserved,
        uncovered,
        hints,
        runs,
        in_runs,
        summarized,
        kernels: module.entries().map(|f| f.name.clone()).collect(),
        launch_params,
    })
}
