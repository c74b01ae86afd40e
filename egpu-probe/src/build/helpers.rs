//! Probe Rust's helpers, as the builder records them.

use egpu_ebpf::helpers::id;

use super::val;
use super::values::Val;
use crate::ir::{Expr, Ty};

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
