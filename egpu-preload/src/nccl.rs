//! NCCL's collectives and point-to-point calls in unmodified programs (issue 29).
//!
//! This library exports `ncclAllReduce`, `ncclBroadcast`, `ncclReduceScatter`, `ncclAllGather`,
//! `ncclSend`, `ncclRecv`, `ncclGroupStart`, `ncclGroupEnd` and `ncclCommDestroy`; a program
//! linked against `libnccl.so.2` reaches them first, and each forwards to the next definition
//! (`dlsym(RTLD_NEXT, …)`, found at first use, like the CUDA entry points, see [`Hook`]). Each
//! operation counts its calls, its bytes, the host time of the call (the wall time the real
//! function took to return on the calling thread: NCCL enqueues work on a stream, so this is
//! **not** GPU time) and the size and rank of the last communicator it was called on (asked of
//! NCCL with `ncclCommCount` and `ncclCommUserRank` once per communicator, cached until
//! `ncclCommDestroy`). The bytes of one call are `count` × the size of `datatype`, where `count`
//! is the count the call takes: the send buffer of all-reduce, broadcast and send, the receive
//! buffer of recv, the receive buffer of reduce-scatter (`recvcount`) and the send buffer of
//! all-gather (`sendcount`): what one rank contributes or gets per call, not the traffic on the
//! wire. A call inside `ncclGroupStart`/`ncclGroupEnd` counts when it is made (its host time is
//! the enqueue); the group calls count on their own.
//!
//! Nothing else is touched: when the program never calls NCCL, these functions never run and the
//! summary has no `nccl` line. When no real NCCL is found, a call returns `ncclSystemError` (2).

use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use crate::real::Hook;

type NcclResult = c_int;
type Comm = *mut c_void;
type Stream = *mut c_void;
/// `ncclSystemError`: what a call returns when there is no real NCCL behind this library.
const NO_NCCL: NcclResult = 2;

/// The operations counted, in the summary's order.
#[derive(Clone, Copy)]
enum Op {
    AllReduce,
    Broadcast,
    ReduceScatter,
    AllGather,
    Send,
    Recv,
    GroupStart,
    GroupEnd,
}

const NAMES: [&str; 8] = [
    "allreduce",
    "broadcast",
    "reducescatter",
    "allgather",
    "send",
    "recv",
    "groupstart",
    "groupend",
];

/// One operation's counts.
struct Counts {
    calls: AtomicU64,
    bytes: AtomicU64,
    host_ns: AtomicU64,
    /// The size and rank of the last communicator seen, -1 when none.
    ranks: AtomicI64,
    rank: AtomicI64,
}

#[allow(clippy::declare_interior_mutable_const)] // only to repeat it in the array
const ZERO: Counts = Counts {
    calls: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    host_ns: AtomicU64::new(0),
    ranks: AtomicI64::new(-1),
    rank: AtomicI64::new(-1),
};
static COUNTS: [Counts; 8] = [ZERO; 8];

/// The size of one element of NCCL's `ncclDataType_t` (0 `ncclInt8` … 9 `ncclBfloat16`, 10 and
/// 11 the two 8-bit floats); 0 for a value not known.
pub(crate) fn datatype_size(datatype: c_int) -> u64 {
    match datatype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

type CommIntFn = unsafe extern "C" fn(Comm, *mut c_int) -> NcclResult;
static COMM_COUNT: Hook<CommIntFn> = Hook::new(c"ncclCommCount", std::ptr::null_mut);
static COMM_USER_RANK: Hook<CommIntFn> = Hook::new(c"ncclCommUserRank", std::ptr::null_mut);

/// Size and rank per communicator (by address), asked of NCCL once each.
static COMMS: Mutex<Vec<(usize, i64, i64)>> = Mutex::new(Vec::new());

/// How many times NCCL was asked for a communicator's size (the test checks the cache).
static ASKED: AtomicU64 = AtomicU64::new(0);

fn ask(hook: &Hook<CommIntFn>, comm: Comm) -> i64 {
    let mut v: c_int = -1;
    match hook.get() {
        // SAFETY: NCCL's function with a communicator the program passed and an int to fill.
        Some(f) if unsafe { f(comm, &mut v) } == 0 => i64::from(v),
        _ => -1,
    }
}

/// The size and rank of `comm`, cached.
fn size_and_rank(comm: Comm) -> (i64, i64) {
    let mut comms = COMMS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, n, r)) = comms.iter().find(|c| c.0 == comm as usize) {
        return (n, r);
    }
    ASKED.fetch_add(1, Ordering::Relaxed);
    let found = (ask(&COMM_COUNT, comm), ask(&COMM_USER_RANK, comm));
    comms.push((comm as usize, found.0, found.1));
    found
}

/// Calls `real` and counts it as `op`, of `bytes`, on `comm` (null for the group calls).
fn counted(op: Op, bytes: u64, comm: Comm, real: impl FnOnce() -> NcclResult) -> NcclResult {
    // The probes set up (one load once they are), so that a process whose only GPU work is NCCL
    // writes its summary at exit too.
    let _ = crate::defaults::active();
    let start = Instant::now();
    let result = real();
    let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let c = &COUNTS[op as usize];
    c.calls.fetch_add(1, Ordering::Relaxed);
    c.bytes.fetch_add(bytes, Ordering::Relaxed);
    c.host_ns.fetch_add(ns, Ordering::Relaxed);
    if !comm.is_null() {
        let (n, r) = size_and_rank(comm);
        c.ranks.store(n, Ordering::Relaxed);
        c.rank.store(r, Ordering::Relaxed);
    }
    result
}

/// One line per operation called: `nccl OP calls N bytes B ranks R rank r host_ns T` (ranks
/// and rank -1 for the group calls); nothing when NCCL was not called.
pub(crate) fn summary() -> String {
    let mut text = String::new();
    for (c, name) in COUNTS.iter().zip(NAMES) {
        let calls = c.calls.load(Ordering::Relaxed);
        if calls == 0 {
            continue;
        }
        text.push_str(&format!(
            "nccl {name} calls {calls} bytes {} ranks {} rank {} host_ns {}\n",
            c.bytes.load(Ordering::Relaxed),
            c.ranks.load(Ordering::Relaxed),
            c.rank.load(Ordering::Relaxed),
            c.host_ns.load(Ordering::Relaxed),
        ));
    }
    if !text.is_empty() {
        text.push_str(&format!("nccl communicators asked {}\n", ASKED.load(Ordering::Relaxed)));
    }
    text
}

/// Declares an interposed NCCL function: its hook, and the exported function that counts it.
macro_rules! nccl {
    ($hook:ident, $symbol:literal, fn $name:ident($($arg:ident: $ty:ty),*),
     |$($a:ident),*| ($op:expr, $bytes:expr, $comm:expr)) => {
        static $hook: Hook<unsafe extern "C" fn($($ty),*) -> NcclResult> =
            Hook::new($symbol, || $name as *mut c_void);
        #[doc = concat!("`", stringify!($name), "`, counted, then NCCL's.")]
        ///
        /// # Safety
        /// NCCL's contract for the function.
        #[unsafe(no_mangle)]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> NcclResult {
            let Some(real) = $hook.get() else { return NO_NCCL };
            let ($($a),*) = ($($arg),*);
            // SAFETY: NCCL's own function, with the program's arguments.
            counted($op, $bytes, $comm, || unsafe { real($($arg),*) })
        }
    };
}

fn bytes(count: usize, datatype: c_int) -> u64 {
    (count as u64).saturating_mul(datatype_size(datatype))
}

nccl!(ALL_REDUCE, c"ncclAllReduce",
    fn ncclAllReduce(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int,
        op: c_int, comm: Comm, stream: Stream),
    |_s, _r, n, t, _o, c, _st| (Op::AllReduce, bytes(n, t), c));
nccl!(BROADCAST, c"ncclBroadcast",
    fn ncclBroadcast(send: *const c_void, recv: *mut c_void, count: usize, datatype: c_int,
        root: c_int, comm: Comm, stream: Stream),
    |_s, _r, n, t, _o, c, _st| (Op::Broadcast, bytes(n, t), c));
nccl!(REDUCE_SCATTER, c"ncclReduceScatter",
    fn ncclReduceScatter(send: *const c_void, recv: *mut c_void, recvcount: usize,
        datatype: c_int, op: c_int, comm: Comm, stream: Stream),
    |_s, _r, n, t, _o, c, _st| (Op::ReduceScatter, bytes(n, t), c));
nccl!(ALL_GATHER, c"ncclAllGather",
    fn ncclAllGather(send: *const c_void, recv: *mut c_void, sendcount: usize, datatype: c_int,
        comm: Comm, stream: Stream),
    |_s, _r, n, t, c, _st| (Op::AllGather, bytes(n, t), c));
nccl!(SEND, c"ncclSend",
    fn ncclSend(send: *const c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm,
        stream: Stream),
    |_s, n, t, _p, c, _st| (Op::Send, bytes(n, t), c));
nccl!(RECV, c"ncclRecv",
    fn ncclRecv(recv: *mut c_void, count: usize, datatype: c_int, peer: c_int, comm: Comm,
        stream: Stream),
    |_r, n, t, _p, c, _st| (Op::Recv, bytes(n, t), c));

type GroupFn = unsafe extern "C" fn() -> NcclResult;
static GROUP_START: Hook<GroupFn> = Hook::new(c"ncclGroupStart", || ncclGroupStart as *mut c_void);
static GROUP_END: Hook<GroupFn> = Hook::new(c"ncclGroupEnd", || ncclGroupEnd as *mut c_void);

/// `ncclGroupStart`, counted, then NCCL's.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn ncclGroupStart() -> NcclResult {
    let Some(real) = GROUP_START.get() else { return NO_NCCL };
    // SAFETY: NCCL's own function; it takes nothing.
    counted(Op::GroupStart, 0, std::ptr::null_mut(), || unsafe { real() })
}

/// `ncclGroupEnd`, counted, then NCCL's.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn ncclGroupEnd() -> NcclResult {
    let Some(real) = GROUP_END.get() else { return NO_NCCL };
    // SAFETY: NCCL's own function; it takes nothing.
    counted(Op::GroupEnd, 0, std::ptr::null_mut(), || unsafe { real() })
}

type DestroyFn = unsafe extern "C" fn(Comm) -> NcclResult;
static COMM_DESTROY: Hook<DestroyFn> =
    Hook::new(c"ncclCommDestroy", || ncclCommDestroy as *mut c_void);

/// `ncclCommDestroy`: forgets the communicator's size and rank (its address may be reused),
/// then NCCL's.
///
/// # Safety
/// NCCL's contract for the function.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ncclCommDestroy(comm: Comm) -> NcclResult {
    let Some(real) = COMM_DESTROY.get() else { return NO_NCCL };
    COMMS.lock().unwrap_or_else(|p| p.into_inner()).retain(|c| c.0 != comm as usize);
    // SAFETY: NCCL's own function, with the program's communicator.
    unsafe { real(comm) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_sizes_are_nccls() {
        let sizes: Vec<u64> = (0..12).map(datatype_size).collect();
        assert_eq!(sizes, [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]);
        assert_eq!(datatype_size(12), 0);
    }
}
