//! Runs of accesses whose probes run once, at the run's last access, with `size` the run's
//! total.
//!
//! A run is two or more observed accesses of one attach point, class, operation and direction
//! that follow one another in one straight line of code: no label between them (nothing jumps
//! in), no branch, call or return (nothing jumps out), none of them guarded or generic, each a
//! load, store, atomic or tensor map write of a size known when instrumenting or a `cp.async`
//! (at most 16 bytes; not bulk or tensor copies), and at most [`MAX_RUN`] of them. Every probe
//! attached at that point must be [`batchable`] with the run's constants. At each access but the
//! last, the access's size is added to a register of the function; at the last, the probes run
//! once with that register as their `size`, which then starts again at 0. Every access of a run
//! is executed whenever its first is, so no size is left behind.

use std::collections::BTreeMap;

use egpu_ebpf::{DeviceEvent, MemAccessCtx};

use super::DeviceProbe;
use super::access::{Observation, Observed};
use crate::ptx::{PieceKind, PtxInstruction, PtxModule};
use crate::translate::{SiteConstants, batchable};

/// The most accesses a run holds.
pub(super) const MAX_RUN: usize = 64;

/// An access's part in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Its size is added to the run's register; no probe runs.
    Adds,
    /// The run's last: the probes run, with the run's total.
    Last,
}

/// The roles in runs of the accesses (by piece) of a function whose `instructions` these are
/// (with what each is to the injector, `observations`), for `selected`'s probes (those attached
/// to it, with their attach points); the accesses `apart` names are in no run (their probes
/// run as adds, `summaries.rs`).
pub(super) fn runs(
    module: &PtxModule,
    instructions: &[(usize, PtxInstruction<'_>)],
    observations: &[Observation],
    selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)],
    kernel_id: u64,
    apart: &dyn Fn(usize) -> bool,
) -> BTreeMap<usize, Role> {
    let mut roles = BTreeMap::new();
    let mut run: Vec<usize> = Vec::new();
    let mut kind: Option<SiteConstants> = None;
    let mut event = None;
    let mut previous: Option<usize> = None;
    let mut verdicts: BTreeMap<(usize, u32, u32, bool, bool), bool> = BTreeMap::new();
    let mut close = |run: &mut Vec<usize>| {
        if run.len() >= 2 {
            for &p in &run[..run.len() - 1] {
                roles.insert(p, Role::Adds);
            }
            roles.insert(run[run.len() - 1], Role::Last);
        }
        run.clear();
    };
    for ((piece, insn), observation) in instructions.iter().zip(observations) {
        let labelled = previous
            .is_some_and(|p| (p + 1..*piece).any(|k| module.pieces()[k].kind == PieceKind::Label));
        previous = Some(*piece);
        if labelled {
            close(&mut run);
        }
        if matches!(insn.base(), "bra" | "brx" | "call" | "ret" | "exit" | "trap") {
            close(&mut run);
            continue;
        }
        let Observation::Observed(o) = observation else { continue };
        let site = SiteConstants {
            kernel_id,
            class: o.class,
            op: o.op,
            fetch: o.fetch,
            is_store: o.is_store,
        };
        let attached = selected.iter().filter(|(_, _, e)| *e == o.event);
        // A generic access is one only when its address is global at run time; a bulk copy's
        // size may be large, a tensor copy's is looked up in its own code: not in a run.
        let small = match o.class {
            MemAccessCtx::LOAD_STORE | MemAccessCtx::ATOMIC | MemAccessCtx::TENSOR_MAP => {
                o.size_code.is_none()
            }
            class => class == MemAccessCtx::ASYNC_COPY,
        };
        let fits = !apart(*piece)
            && insn.guard.is_none()
            && !o.generic
            && small
            && attached.clone().next().is_some()
            && attached.clone().all(|&(i, p, _)| {
                *verdicts
                    .entry((i, site.class, site.op, site.fetch, site.is_store))
                    .or_insert_with(|| batchable(p.program, &site))
            });
        let same = kind == Some(site) && event == Some(o.event) && run.len() < MAX_RUN;
        if !same || !fits {
            close(&mut run);
        }
        if fits {
            run.push(*piece);
            (kind, event) = (Some(site), Some(o.event));
        } else {
            kind = None;
        }
    }
    close(&mut run);
    roles
}

/// PTX that adds the access's size to the run's 32-bit register `total` (the size computed
/// into a register of its own first when it is known at run time only).
pub(super) fn add_size(o: &Observed, total: &str) -> String {
    match &o.size_code {
        None => format!("\tadd.u32 {total}, {total}, {};\n", o.size),
        Some(code) => {
            let size = format!("{total}_s");
            format!(
                "\t{{\n\t.reg .b32 {size};\n{}\tadd.u32 {total}, {total}, {size};\n\t}}\n",
                code.replace("{SIZE}", &size)
            )
        }
    }
}
