//! Which maps a program only adds to ([`adds_only`]): those whose values no instruction and no
//! helper of the program reads, so that their adds can go to per-SM copies of the map's slots
//! ([`DeviceMap::spread`](super::DeviceMap::spread)) without the program seeing a difference.
//! And which it only reads ([`reads_only`]): a device copy of such a map can be a copy of the
//! host's, refreshed, and never merged back.

use egpu_ebpf::helpers::id as helper_id;
use egpu_ebpf::verifier::{AccessRegion, Verified};
use egpu_ebpf::{AluOp, AtomicOp, CallTarget, Instruction, MapKind, Operand, Program, Reg};

/// For each map of the program's table: whether the program only adds to its values, so that
/// the adds may be spread over per-SM copies and summed by the map's reader. True when the map
/// is a hash map or an array and every access to its values, on every path, is an atomic add
/// whose old value is not read; no helper is handed a pointer into its values; its entries are
/// inserted only by `bpf_map_update_elem` with `BPF_NOEXIST` (a value stored once, to which the
/// adds then add) and never removed; and no access of the program reaches different regions on
/// different paths (it could read the values).
pub fn adds_only(verified: &Verified) -> Vec<bool> {
    let program = verified.program();
    let mut only = keyed_or_indexed(program);
    let decoded = program.decoded();
    for (i, d) in decoded.iter().enumerate() {
        if let Some(access) = verified.access(d.pc) {
            let add = matches!(d.insn, Instruction::Atomic { op: AtomicOp::Add, fetch: false, .. });
            match access.region {
                AccessRegion::MapValue(m) if !add => set(&mut only, m),
                AccessRegion::Mixed if !add => only.iter_mut().for_each(|o| *o = false),
                _ => {}
            }
        }
        let Instruction::Call(target) = d.insn else { continue };
        let Some(call) = verified.call(d.pc) else {
            if !matches!(target, CallTarget::Local(_)) {
                only.iter_mut().for_each(|o| *o = false);
            }
            continue;
        };
        for arg in call.args.iter().flatten() {
            match arg.region {
                AccessRegion::MapValue(m) => set(&mut only, m),
                AccessRegion::Mixed => only.iter_mut().for_each(|o| *o = false),
                _ => {}
            }
        }
        let CallTarget::Helper(id) = target else { continue };
        let inserts_once = id == helper_id::MAP_UPDATE_ELEM && no_exist_before(verified, i);
        if matches!(id, helper_id::MAP_UPDATE_ELEM | helper_id::MAP_DELETE_ELEM) && !inserts_once {
            match call.map {
                Some(m) => set(&mut only, m),
                None => only.iter_mut().for_each(|o| *o = false),
            }
        }
    }
    only
}

/// For each map of the program's table: whether the program only reads it. True when the map
/// is a hash map or an array, no store or atomic reaches its values (on any path), no
/// `bpf_map_update_elem` or `bpf_map_delete_elem` is called on it, and no access of the program
/// reaches different regions on different paths while writing.
pub fn reads_only(verified: &Verified) -> Vec<bool> {
    let program = verified.program();
    let mut only = keyed_or_indexed(program);
    for d in program.decoded() {
        let writes = matches!(d.insn, Instruction::Store { .. } | Instruction::Atomic { .. });
        if let (true, Some(access)) = (writes, verified.access(d.pc)) {
            match access.region {
                AccessRegion::MapValue(m) => set(&mut only, m),
                AccessRegion::Mixed => only.iter_mut().for_each(|o| *o = false),
                _ => {}
            }
        }
        let Instruction::Call(CallTarget::Helper(id)) = d.insn else { continue };
        if matches!(id, helper_id::MAP_UPDATE_ELEM | helper_id::MAP_DELETE_ELEM) {
            match verified.call(d.pc).and_then(|c| c.map) {
                Some(m) => set(&mut only, m),
                None => only.iter_mut().for_each(|o| *o = false),
            }
        }
    }
    only
}

/// For each map of `program`'s table: whether it is a hash map or an array (the kinds the
/// verdicts above can say yes of).
fn keyed_or_indexed(program: &Program) -> Vec<bool> {
    program.maps().iter().map(|d| matches!(d.kind, MapKind::Hash | MapKind::Array)).collect()
}

fn set(only: &mut [bool], m: u32) {
    if let Some(o) = only.get_mut(m as usize) {
        *o = false;
    }
}

/// Whether `r4` holds `BPF_NOEXIST` (1) at the call that is instruction `i`: loaded by a
/// `mov r4, 1` earlier in the same straight run of instructions, with nothing after it writing
/// `r4` and no jump or function landing in between.
fn no_exist_before(verified: &Verified, i: usize) -> bool {
    let program = verified.program();
    let decoded = program.decoded();
    let mut j = i;
    while j > 0 {
        if lands_at(program, decoded[j].pc) {
            return false;
        }
        j -= 1;
        let insn = decoded[j].insn;
        if let Instruction::Alu { op: AluOp::Mov, dst: Reg::R4, src, .. } = insn {
            return src == Operand::Imm(1);
        }
        if insn.written_reg() == Some(Reg::R4)
            || matches!(insn, Instruction::Call(_) | Instruction::Exit)
            || insn.jump_target(decoded[j].pc).is_some()
        {
            return false;
        }
    }
    false
}

/// Whether a jump lands at `pc`, or a local function starts there: whether an instruction there
/// may be reached other than from the one before it.
pub(super) fn lands_at(program: &Program, pc: usize) -> bool {
    program.decoded().iter().any(|d| d.insn.jump_target(d.pc) == Some(pc as i64))
        || program.functions().iter().any(|f| f.start == pc)
}
