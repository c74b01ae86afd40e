//! The numbered helper table: one definition that every engine follows.
//!
//! Where a Linux helper means the same thing, egpu uses its number, so programs built by clang
//! for Linux call egpu's helpers unchanged. egpu's own helpers take numbers from
//! [`EGPU_HELPER_BASE`] up, a range Linux will not reach (its helper numbers are below 256 and
//! frozen). Each entry says what the helper does on the CPU and on the GPU, and whether the CPU
//! VM and the GPU translation provide it today (`on_cpu`, `on_gpu`: the VM's and the translator's
//! tests check both against what they bind); an engine refuses, when the program is loaded, a
//! call to a helper it does not provide. `egpu list` prints this table.

/// First number of egpu's own helpers.
pub const EGPU_HELPER_BASE: u32 = 0x1_0000;

/// Helper numbers.
pub mod id {
    /// `void *bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: u32 = 1;
    /// `long bpf_map_update_elem(map, key, value, flags)`.
    pub const MAP_UPDATE_ELEM: u32 = 2;
    /// `long bpf_map_delete_elem(map, key)`.
    pub const MAP_DELETE_ELEM: u32 = 3;
    /// `u64 bpf_ktime_get_ns(void)`.
    pub const KTIME_GET_NS: u32 = 5;
    /// `u32 bpf_get_prandom_u32(void)`.
    pub const GET_PRANDOM_U32: u32 = 7;
    /// `u32 bpf_get_smp_processor_id(void)`.
    pub const GET_SMP_PROCESSOR_ID: u32 = 8;
    /// `u64 bpf_get_current_pid_tgid(void)`.
    pub const GET_CURRENT_PID_TGID: u32 = 14;
    /// `long bpf_ringbuf_output(ringbuf, data, size, flags)`.
    pub const RINGBUF_OUTPUT: u32 = 130;
    /// `long bpf_loop(nr_loops, callback_fn, callback_ctx, flags)`.
    pub const LOOP: u32 = 181;
    /// `u32 egpu_warp_lanes(void)`: the lanes of the warp running the call.
    pub const WARP_LANES: u32 = super::EGPU_HELPER_BASE;
    /// `u32 egpu_warp_leader(void)`: 1 in the lowest lane of those running the call, else 0.
    pub const WARP_LEADER: u32 = super::EGPU_HELPER_BASE + 1;
    /// `u32 egpu_warp_sectors(addr, size)`: the 32-byte sectors the lanes' accesses touch.
    pub const WARP_SECTORS: u32 = super::EGPU_HELPER_BASE + 2;
    /// `u32 egpu_warp_peers(value)`: in the lowest lane of those with the same value, how many
    /// have it; 0 in the others.
    pub const WARP_PEERS: u32 = super::EGPU_HELPER_BASE + 3;
    /// `u64 egpu_warp_stride(addr)`: the bytes between consecutive lanes' addresses when the
    /// lanes' addresses step evenly, `u64::MAX` when they do not (a gather).
    pub const WARP_STRIDE: u32 = super::EGPU_HELPER_BASE + 4;
    /// `long egpu_ringbuf_output_warp(ringbuf, data, size, flags)`: one record per warp-level
    /// call, the lowest lane's.
    pub const RINGBUF_OUTPUT_WARP: u32 = super::EGPU_HELPER_BASE + 5;
    /// `u64 egpu_delay_ns(ns, since)`: holds the calling thread until `ns` nanoseconds (at most
    /// [`MAX_DELAY_NS`](super::MAX_DELAY_NS)) have passed since `since`, a value of
    /// [`CLOCK`] read earlier by the same probe (0: since the call), so that what the probe did
    /// meanwhile counts toward them; returns the nanoseconds since then.
    pub const DELAY_NS: u32 = super::EGPU_HELPER_BASE + 6;
    /// `u64 egpu_clock()`: the clock waits count on, for [`DELAY_NS`]'s `since` (on the GPU
    /// `%clock64`'s cycles, or `%globaltimer`'s nanoseconds where the SM's clock is not known;
    /// the monotonic clock's nanoseconds on the CPU): a probe reads it when it starts, so that
    /// its own work is part of its wait.
    pub const CLOCK: u32 = super::EGPU_HELPER_BASE + 7;
}

/// The most nanoseconds one call of `egpu_delay_ns` may wait: 2^20 − 1 (about 1.05 ms), which
/// the verifier proves of its argument (a mask with it is one instruction that proves it).
/// Emulating a slower memory tier adds hundreds of nanoseconds per access; a host event such
/// as a copy may be slowed by more, a call per chunk. A bound keeps a probe
/// from stalling the thread it runs in, a GPU kernel's or the program's own, without end.
pub const MAX_DELAY_NS: u64 = (1 << 20) - 1;

/// What a helper argument must be. The verifier checks calls against these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Any initialised scalar.
    Scalar,
    /// A reference (`lddw rX, map[n]`) to a map with keys and values: hash, array, per-CPU.
    MapRef,
    /// A reference to a ring buffer map.
    RingBuf,
    /// A pointer to `key_size` readable bytes of the map passed before it.
    MapKey,
    /// A pointer to `value_size` readable bytes of the map passed before it.
    MapValue,
    /// A pointer to readable memory whose size is the next argument.
    Mem,
    /// The size in bytes of the memory passed before it: a bounded scalar.
    MemSize,
    /// How many times to call the function that follows: a scalar whose bound the verifier
    /// gives the function's index.
    Count,
    /// A local function (`lddw rX, func f`).
    Func,
    /// A pointer to the stack, or 0: passed on to a callback.
    StackOrNull,
    /// Nanoseconds to wait: a scalar the verifier bounds by [`MAX_DELAY_NS`].
    Nanoseconds,
}

impl ArgKind {
    /// What the argument is, in a few words (`egpu list` prints it).
    pub const fn describe(self) -> &'static str {
        match self {
            ArgKind::Scalar => "scalar",
            ArgKind::MapRef => "map",
            ArgKind::RingBuf => "ring buffer map",
            ArgKind::MapKey => "pointer to a key",
            ArgKind::MapValue => "pointer to a value",
            ArgKind::Mem => "pointer to memory",
            ArgKind::MemSize => "size of that memory",
            ArgKind::Count => "number of calls",
            ArgKind::Func => "local function (lddw func)",
            ArgKind::StackOrNull => "pointer to the stack, or 0",
            ArgKind::Nanoseconds => "nanoseconds, at most 1,048,575",
        }
    }
}

/// One argument of a helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arg {
    /// Its name, as in Linux's declaration of the helper.
    pub name: &'static str,
    /// What it must be.
    pub kind: ArgKind,
}

const fn arg(name: &'static str, kind: ArgKind) -> Arg {
    Arg { name, kind }
}

/// What a helper returns in `r0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetKind {
    /// A scalar.
    Scalar,
    /// A pointer to a value of the map argument, or null: it must be checked before use.
    MapValueOrNull,
}

impl RetKind {
    /// What the result is, in a few words (`egpu list` prints it).
    pub const fn describe(self) -> &'static str {
        match self {
            RetKind::Scalar => "scalar",
            RetKind::MapValueOrNull => "pointer to a value, or null",
        }
    }
}

/// One helper of the table.
#[derive(Clone, Copy, Debug)]
pub struct HelperInfo {
    /// Its number, the `imm` of `call`.
    pub id: u32,
    /// Its name, as in Linux where it has one.
    pub name: &'static str,
    /// Its arguments, in `r1`, `r2`, ….
    pub args: &'static [Arg],
    /// Its result.
    pub ret: RetKind,
    /// What it does on the CPU.
    pub cpu: &'static str,
    /// What it does on the GPU.
    pub gpu: &'static str,
    /// Whether the CPU VM provides it in this version.
    pub on_cpu: bool,
    /// Whether the GPU translation provides it in this version.
    pub on_gpu: bool,
}

impl HelperInfo {
    /// Where it runs: `CPU VM and GPU`, `CPU VM`, `GPU` or `nowhere yet`.
    pub const fn runs(&self) -> &'static str {
        match (self.on_cpu, self.on_gpu) {
            (true, true) => "CPU VM and GPU",
            (true, false) => "CPU VM",
            (false, true) => "GPU",
            (false, false) => "nowhere yet",
        }
    }
}

/// Every helper egpu defines.
pub const HELPERS: &[HelperInfo] = &[
    HelperInfo {
        id: id::MAP_LOOKUP_ELEM,
        name: "bpf_map_lookup_elem",
        args: &[arg("map", ArgKind::MapRef), arg("key", ArgKind::MapKey)],
        ret: RetKind::MapValueOrNull,
        cpu: "pointer to the value stored under the key (in the calling CPU's shard of a per-CPU \
              map), or null",
        gpu: "inlined: an array's element (null out of range), or a hash map's value (null when \
              the key is absent), in the SM's shard (cpu_shards + %smid mod sm_shards) for a \
              per-CPU map; on sm_70 and later, the lanes of a warp looking up one key make one \
              search",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::MAP_UPDATE_ELEM,
        name: "bpf_map_update_elem",
        args: &[
            arg("map", ArgKind::MapRef),
            arg("key", ArgKind::MapKey),
            arg("value", ArgKind::MapValue),
            arg("flags", ArgKind::Scalar),
        ],
        ret: RetKind::Scalar,
        cpu: "stores the value under the key as the flags say (0 any, 1 only new, 2 only \
              existing); 0, or -E2BIG when the map is full, -EEXIST, -ENOENT",
        gpu: "inlined, on the low 32 bits of the flags; 0 when stored. Arrays: -E2BIG out of \
              range, else -EEXIST with flag 1, -EINVAL with flags above 2. Hash maps: a live \
              key's value is replaced under any flags but 1 (-EEXIST); an absent key gives \
              -ENOENT with flag 2, -E2BIG (counted) when the shard has no empty slot, else \
              -EINVAL with flags above 2, else an insert (never into a tombstone; -E2BIG, \
              counted, past the capacity). Per-CPU maps in the SM's shard",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::MAP_DELETE_ELEM,
        name: "bpf_map_delete_elem",
        args: &[arg("map", ArgKind::MapRef), arg("key", ArgKind::MapKey)],
        ret: RetKind::Scalar,
        cpu: "removes the key; 0, or -ENOENT when it is absent (-EINVAL on arrays)",
        gpu: "inlined: the entry becomes a tombstone, 0, or -ENOENT when it is absent (in the \
              SM's shard for a per-CPU hash map); -EINVAL on arrays",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::KTIME_GET_NS,
        name: "bpf_ktime_get_ns",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "CLOCK_MONOTONIC in ns",
        gpu: "%globaltimer in ns",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::GET_PRANDOM_U32,
        name: "bpf_get_prandom_u32",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "a pseudo-random u32 from a per-thread generator",
        gpu: "a hash (splitmix64's finaliser) of %clock64, %tid.x and %ctaid.x: no generator \
              state",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::GET_SMP_PROCESSOR_ID,
        name: "bpf_get_smp_processor_id",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "the CPU the calling thread runs on",
        gpu: "the streaming multiprocessor, %smid (read once when an instrumented kernel \
              starts)",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::GET_CURRENT_PID_TGID,
        name: "bpf_get_current_pid_tgid",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "process id << 32 | thread id",
        gpu: "a constant: the id of the host process that injected the probe << 32 (0 in \
              stand-alone kernels); the thread half is 0",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::RINGBUF_OUTPUT,
        name: "bpf_ringbuf_output",
        args: &[
            arg("ringbuf", ArgKind::RingBuf),
            arg("data", ArgKind::Mem),
            arg("size", ArgKind::MemSize),
            arg("flags", ArgKind::Scalar),
        ],
        ret: RetKind::Scalar,
        cpu: "copies a record (at most the ring's record size, zero-padded) into the ring of the \
              calling CPU; 0, or -EAGAIN when the ring is full (the drop is counted)",
        gpu: "inlined: copies a record (at most the record size, zero-padded) into the ring of \
              the SM (ring 0 without SM rings), with one ticket add per warp \
              (sm_70 and later; a ring drained while kernels run, written by a probe at an access: \
              tickets from the lane's batch of 32, published when full or at the thread's exit); 0, -E2BIG when the size exceeds the record size, or -EAGAIN \
              when the ring is full (dropped and counted, never waited for); flags ignored; for \
              rings in GPU memory only (a ring read live from mapped memory is refused)",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::RINGBUF_OUTPUT_WARP,
        name: "egpu_ringbuf_output_warp",
        args: &[
            arg("ringbuf", ArgKind::RingBuf),
            arg("data", ArgKind::Mem),
            arg("size", ArgKind::MemSize),
            arg("flags", ArgKind::Scalar),
        ],
        ret: RetKind::Scalar,
        cpu: "as bpf_ringbuf_output: a warp of one lane writes its record",
        gpu: "one record for the lanes that run the call together: the lowest lane's data, \
              written by it alone, with no group of lanes to gather (a ring drained while \
              kernels run, at an access: a ticket from the lane's batch of 32, the record's \
              stores, and the batch published when full); the others write nothing; 0 in \
              every lane, -EAGAIN when the record was dropped (a full ring, counted); -E2BIG \
              when the size exceeds the record size; flags ignored; for rings in GPU memory only",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::LOOP,
        name: "bpf_loop",
        args: &[
            arg("nr_loops", ArgKind::Count),
            arg("callback_fn", ArgKind::Func),
            arg("callback_ctx", ArgKind::StackOrNull),
            arg("flags", ArgKind::Scalar),
        ],
        ret: RetKind::Scalar,
        cpu: "calls callback_fn(i, callback_ctx) for i from 0 while i < nr_loops (the low 32 \
              bits) and the callback returns 0; the calls made, or -E2BIG when nr_loops \
              exceeds 1 << 23. The verifier follows the callback a few times, not once per \
              call, and requires flags to be 0 and the callback to return 0 or 1",
        gpu: "the same, as a loop in the probe's code: each call is a call of the callback's \
              function",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::WARP_LANES,
        name: "egpu_warp_lanes",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "1: a thread is a warp of one lane",
        gpu: "the lanes of the warp that run the call together (the population count of \
              activemask)",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::WARP_LEADER,
        name: "egpu_warp_leader",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "1: the one lane leads",
        gpu: "1 in the lowest of the lanes that run the call together (activemask), 0 in the \
              others: one lane per warp-level request does the warp's work",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::WARP_SECTORS,
        name: "egpu_warp_sectors",
        args: &[arg("addr", ArgKind::Scalar), arg("size", ArgKind::Scalar)],
        ret: RetKind::Scalar,
        cpu: "the 32-byte sectors that size bytes at addr touch (at least 1): a warp of one lane",
        gpu: "the distinct 32-byte sectors that the accesses of size bytes at addr of the lanes \
              running the call together touch, the same in every lane (match.any.sync on each \
              lane's first sector, a vote of the groups' lowest lanes, and redux.sync of the \
              sectors past a lane's first, which only an access of over 32 bytes or a \
              misaligned one has: those are counted per lane, an upper bound); 32 for 32 lanes \
              reading 4 bytes 128 bytes apart, 4 for 32 lanes reading consecutive floats",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::WARP_PEERS,
        name: "egpu_warp_peers",
        args: &[arg("value", ArgKind::Scalar)],
        ret: RetKind::Scalar,
        cpu: "1: the one lane is its own group",
        gpu: "in the lowest of the lanes running the call together whose value is the same \
              (match.any.sync), how many they are; 0 in the others: one lane per group adds \
              the group's count (32 lanes reading one page: one add of 32)",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::WARP_STRIDE,
        name: "egpu_warp_stride",
        args: &[arg("addr", ArgKind::Scalar)],
        ret: RetKind::Scalar,
        cpu: "0: one lane steps nowhere",
        gpu: "over the lanes running the call together, ordered by lane: when every lane's addr \
              is the lowest lane's plus its distance in lanes times one stride, the stride's \
              magnitude in bytes (0: one address; 4: consecutive floats; 128: floats 128 bytes \
              apart), else u64::MAX (a gather: no one stride); 0 for a lane alone",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::DELAY_NS,
        name: "egpu_delay_ns",
        args: &[arg("ns", ArgKind::Nanoseconds), arg("since", ArgKind::Scalar)],
        ret: RetKind::Scalar,
        cpu: "the calling thread spins on the monotonic clock until ns nanoseconds have \
              passed since `since` (egpu_clock's, or 0: the call); the nanoseconds since then",
        gpu: "the lane spins on %clock64 until ns nanoseconds, in cycles of the SM's rated \
              clock, have passed since `since` (egpu_clock's, or 0: the call), each lane on \
              its own (on %globaltimer, in 32 ns steps on the H200, where the SM's clock is \
              not known); the nanoseconds since then",
        on_cpu: true,
        on_gpu: true,
    },
    HelperInfo {
        id: id::CLOCK,
        name: "egpu_clock",
        args: &[],
        ret: RetKind::Scalar,
        cpu: "the monotonic clock in nanoseconds",
        gpu: "%clock64 (the SM's cycles) where the SM's clock is known, else %globaltimer: \
              for egpu_delay_ns's since only",
        on_cpu: true,
        on_gpu: true,
    },
];

/// The helper numbered `id`, if egpu defines one.
pub fn helper(id: u32) -> Option<&'static HelperInfo> {
    HELPERS.iter().find(|h| h.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is what `egpu list` prints: each helper once, with named arguments that fit in
    /// `r1`–`r5`, and somewhere to run.
    #[test]
    fn every_helper_is_listed_once_with_its_arguments() {
        for (i, h) in HELPERS.iter().enumerate() {
            let earlier = &HELPERS[..i];
            assert!(earlier.iter().all(|e| e.id != h.id && e.name != h.name), "{}", h.name);
            assert_eq!(helper(h.id).map(|found| found.name), Some(h.name));
            assert!(h.args.len() <= 5, "{}", h.name);
            for (j, a) in h.args.iter().enumerate() {
                assert!(!a.name.is_empty() && !h.args[..j].iter().any(|b| b.name == a.name));
                // A key or value follows its map; a size follows its memory.
                let before = j.checked_sub(1).map(|k| h.args[k].kind);
                match a.kind {
                    ArgKind::MapKey | ArgKind::MapValue => {
                        assert!(h.args[..j].iter().any(|b| b.kind == ArgKind::MapRef), "{}", h.name)
                    }
                    ArgKind::MemSize => assert_eq!(before, Some(ArgKind::Mem), "{}", h.name),
                    _ => {}
                }
            }
            assert_ne!(h.runs(), "nowhere yet", "{}", h.name);
            assert!(h.name.starts_with("bpf_") || h.id >= EGPU_HELPER_BASE, "{}", h.name);
        }
        assert!(helper(4).is_none());
        let lookup = helper(id::MAP_LOOKUP_ELEM).expect("lookup");
        assert_eq!(lookup.ret.describe(), "pointer to a value, or null");
        assert_eq!(lookup.args.iter().map(|a| a.name).collect::<Vec<_>>(), ["map", "key"]);
    }
}
