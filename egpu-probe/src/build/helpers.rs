//! Probe Rust's helpers, as the builder records them.

use egpu_ebpf::helpers::{MAX_DELAY_NS, id};

use super::values::Val;
use super::values::local_uninit;
use super::{expr, push, val};
use crate::ir::{BinOp, CallArg, CmpOp, Expr, Stmt, Ty};

/// Time in ns: the monotonic clock on the CPU, `%globaltimer` on the GPU.
pub fn ktime_ns() -> Val<u64> {
    val(Expr::Call(Ty::U64, id::KTIME_GET_NS, vec![]))
}

/// The CPU (or, on the GPU, the SM) the probe runs on.
pub fn cpu_id() -> Val<u32> {
    val(Expr::Call(Ty::U32, id::GET_SMP_PROCESSOR_ID, vec![]))
}

/// A pseudo-random `u32`.
pub fn prandom_u32() -> Val<u32> {
    val(Expr::Call(Ty::U32, id::GET_PRANDOM_U32, vec![]))
}

/// The lanes of the warp that run the call together (1 on the CPU).
pub fn warp_lanes() -> Val<u32> {
    val(Expr::Call(Ty::U32, id::WARP_LANES, vec![]))
}

/// Whether this lane is the lowest of those running the call together (always, on the CPU):
/// where one lane does the warp's work.
pub fn warp_leader() -> Val<bool> {
    val(Expr::Call(Ty::Bool, id::WARP_LEADER, vec![]))
}

/// The distinct 32-byte sectors that the accesses of `size` bytes at `addr` of the lanes running
/// the call together touch (on the CPU, those of the one access): 4 for 32 lanes reading
/// consecutive floats, 32 for 32 lanes reading floats 128 bytes apart.
pub fn warp_sectors(addr: Val<u64>, size: Val<u32>) -> Val<u32> {
    let args = vec![CallArg::Value(expr(addr)), CallArg::Value(expr(size))];
    val(Expr::Call(Ty::U32, id::WARP_SECTORS, args))
}

/// In the lowest of the lanes running the call together whose `value` is the same, how many
/// they are; 0 in the others (1 on the CPU): one add per group of lanes, of the group's count.
pub fn warp_peers(value: Val<u64>) -> Val<u32> {
    val(Expr::Call(Ty::U32, id::WARP_PEERS, vec![CallArg::Value(expr(value))]))
}

/// The bytes between consecutive lanes' addresses when the lanes running the call together step
/// evenly through memory (0: one address; 4: consecutive floats), `u64::MAX` when they do not
/// (a gather); 0 on the CPU, a lane alone.
pub fn warp_stride(addr: Val<u64>) -> Val<u64> {
    val(Expr::Call(Ty::U64, id::WARP_STRIDE, vec![CallArg::Value(expr(addr))]))
}

/// Waits `ns` nanoseconds, spinning (each lane on its own on the GPU), and gives the
/// nanoseconds that passed; a wait over [`MAX_DELAY_NS`](egpu_ebpf::helpers::MAX_DELAY_NS),
/// 2^20 − 1, waits that.
pub fn delay_ns(ns: Val<u64>) -> Val<u64> {
    delay(Expr::Const(Ty::U64, 0), ns)
}

/// Waits until `ns` nanoseconds have passed since `since`, a value of [`clock`] the probe read
/// earlier, spinning (each lane on its own on the GPU), so that what the probe did meanwhile
/// counts toward them; gives the nanoseconds since `since`. Capped as [`delay_ns`] is.
pub fn delay_ns_since(since: Val<u64>, ns: Val<u64>) -> Val<u64> {
    delay(expr(since), ns)
}

/// The clock waits count on (`egpu_clock`): on the GPU `%clock64`'s cycles where the SM's clock
/// is known, else `%globaltimer`'s ns; the monotonic clock on the CPU. For [`delay_ns_since`].
pub fn clock() -> Val<u64> {
    val(Expr::Call(Ty::U64, id::CLOCK, vec![]))
}

/// `egpu_delay_ns(ns, since)`. The program caps `ns` itself, then masks it with `MAX_DELAY_NS`
/// (which changes nothing left after the cap), so the verifier sees the bound wherever the
/// capped value is kept: it follows a bound from a comparison to the register compared, not
/// to a copy of the value on the stack. (A mask is one instruction on the GPU; the remainder by
/// a constant this used to take was a call of `ptxas`'s 64-bit division routine.) A value the
/// program masked itself with a constant of at most the bound (`ns & MAX_DELAY_NS`) is passed
/// on as it is: the cap's branch would lengthen a far request's path for nothing.
fn delay(since: Expr, ns: Val<u64>) -> Val<u64> {
    const _: () = assert!((MAX_DELAY_NS + 1).is_power_of_two());
    let arg = match expr(ns) {
        Expr::Const(_, c) => Expr::Const(Ty::U64, c.min(MAX_DELAY_NS)),
        // Masked already to at most the maximum (`delta & MAX_DELAY_NS`): nothing to cap.
        masked @ Expr::Binary(BinOp::And, Ty::U64, _, _) if bounded_mask(&masked) => masked,
        _ => {
            let capped = local_uninit::<u64>();
            let over = Expr::Cmp(CmpOp::Gt, Ty::U64, Box::new(expr(ns)), Box::new(max()));
            let ns = expr(ns);
            push(Stmt::If(
                over,
                vec![Stmt::Set(capped.var, max())],
                vec![Stmt::Set(capped.var, ns)],
            ));
            Expr::Binary(BinOp::And, Ty::U64, Box::new(Expr::Var(capped.var)), Box::new(max()))
        }
    };
    let args = vec![CallArg::Value(arg), CallArg::Value(since)];
    val(Expr::Call(Ty::U64, id::DELAY_NS, args))
}

/// Whether `e` is a value masked with a constant of at most [`MAX_DELAY_NS`] (either side).
fn bounded_mask(e: &Expr) -> bool {
    let small = |e: &Expr| matches!(e, Expr::Const(_, c) if *c <= MAX_DELAY_NS);
    matches!(e, Expr::Binary(BinOp::And, _, l, r) if small(l) || small(r))
}

fn max() -> Expr {
    Expr::Const(Ty::U64, MAX_DELAY_NS)
}
