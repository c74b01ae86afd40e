//! What the translation is given, and what it gives back.

use std::collections::BTreeMap;

use egpu_maps::layout::Geometry;

/// Where the probe's context comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Context {
    /// The context is memory at a generic address, held by this 64-bit PTX operand (for user
    /// attach points, and for the conformance kernels).
    Memory(String),
    /// Kernel entry or exit ([`KernelCtx`](egpu_ebpf::KernelCtx)): every field comes from a
    /// special register.
    Kernel {
        /// The kernel's id (64-bit hash of its mangled name).
        kernel_id: u64,
    },
    /// An access to global memory ([`MemAccessCtx`](egpu_ebpf::MemAccessCtx)).
    Access {
        /// The kernel's id.
        kernel_id: u64,
        /// The 64-bit PTX register holding the address accessed.
        addr: String,
        /// Bytes accessed, when known when translating.
        size: u32,
        /// The 32-bit PTX register holding the bytes accessed, when they are known only at run
        /// time (an asynchronous or bulk copy's size); `size` is then ignored.
        size_reg: Option<String>,
        /// The access's index among the kernel's observed accesses.
        site: u32,
        /// Whether the access writes global memory.
        is_store: bool,
        /// Its class ([`MemAccessCtx::class`](egpu_ebpf::MemAccessCtx::class)).
        class: u32,
        /// Its operation, for atomics and reductions ([`MemAccessCtx::op`](egpu_ebpf::MemAccessCtx::op)).
        op: u32,
        /// Whether it is an atomic that returns the old value.
        fetch: bool,
    },
}

impl Context {
    /// The context of a plain load or store (`ld`, `st`) of `size` bytes at `addr`.
    pub fn load_store(
        kernel_id: u64,
        addr: String,
        size: u32,
        site: u32,
        is_store: bool,
    ) -> Context {
        Context::Access {
            kernel_id,
            addr,
            size,
            size_reg: None,
            site,
            is_store,
            class: egpu_ebpf::MemAccessCtx::LOAD_STORE,
            op: 0,
            fetch: false,
        }
    }
}

/// How to translate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Starts every register, label and function name the translation declares; must be unique
    /// in the module the code goes into (for example one per injection site).
    pub prefix: String,
    /// Where the context comes from.
    pub context: Context,
    /// A 64-bit register, declared by the caller, that receives `r0` when the program exits.
    pub result: Option<String>,
    /// The host process id, for `bpf_get_current_pid_tgid`.
    pub pid: u32,
    /// The device side of each map of the program's map table, in its order.
    pub maps: Vec<DeviceMap>,
    /// Four 64-bit registers of the kernel, two slots of an address and a sum (the newer slot
    /// first), through which atomic adds to map values are combined per thread (see
    /// [`combines`](super::combines)): an add to either slot's address adds to its sum; an add
    /// to another address flushes the older slot's sum (`red.add`), and the newer slot becomes
    /// the older. The kernel starts them at 0 and flushes both sums when it exits. `None`:
    /// every add is its own atomic.
    pub combine: Option<[String; 4]>,
    /// The SM version the code will run on, from the module's `.target` (`sm_90`: 90). Below
    /// 80, adds are not aggregated across a warp (`redux.sync` needs sm_80).
    pub sm: u32,
    /// A 32-bit register of the kernel that holds `%smid`, read once when the kernel starts (a
    /// thread never moves to another SM); `None`: read `%smid` where needed.
    pub smid: Option<String>,
    /// A 64-bit register of the kernel that holds the launch's tag id, loaded once when the
    /// kernel starts from the parameter the injector appended to it
    /// ([`InjectOptions::launch_tags`](crate::inject::InjectOptions::launch_tags)): what the
    /// contexts' `tag_id` reads. `None` (a device function, or no such parameter): 0.
    pub tag: Option<String>,
    /// Per map (in [`maps`](Options::maps) order): two 64-bit registers of the kernel, a key and
    /// a value address, through which a thread remembers its last hit in that hash map (keys of
    /// at most 8 bytes, or of two words whose first is the kernel's id): a lookup of the same
    /// key again finds the value without probing. The
    /// kernel starts the address at 0. Only for maps whose entries stay where they are while
    /// the kernel runs: in GPU memory (nobody else writes them) and removed from by no probe of
    /// the kernel (device inserts never reuse a removed entry's slot). `None` or missing: no
    /// cache.
    pub lookup_cache: Vec<Option<LookupCache>>,
    /// Per map (in [`maps`](Options::maps) order): for a ring drained while kernels run
    /// ([`DeviceMap::drained`]) written by a probe that runs many times per thread (the
    /// injector's probes at accesses), three 64-bit registers of the kernel through which a lane takes
    /// its tickets by the batch ([`RING_BATCH`](super::RING_BATCH) at a time): the next ticket,
    /// the batch's end, and the address of the shard's header (`end` 0: no batch). A record
    /// then costs its stores; the claim of room and the tickets (two atomics) are made once
    /// per batch, which is published (its records committed, by one sequence word with
    /// release ordering) when it is full or when the thread exits
    /// ([`close_ring_batch`](super::close_ring_batch)), its unused tickets discarded. The
    /// kernel starts them at 0. Only on `sm_70` and later. `None` or missing: a claim and
    /// tickets per record, published at once.
    pub ring_batches: Vec<Option<[String; 3]>>,
    /// A prefix, unique in the module, for the functions that translations into one module
    /// share: when given, the search of a hash map helper (everything past the lookup cache)
    /// is a call of a `.func` written once per map and helper
    /// ([`Translation::shared`]), rather than code at every call. For kernels with many probe
    /// sites, whose code would otherwise grow by a few hundred instructions per site. `None`:
    /// inline.
    pub outline: Option<String>,
    /// Words of map values that stay the same while the kernel runs, each in a 64-bit register
    /// of the kernel that the kernel loaded when it started: `(map, offset, register)`, the
    /// map's index in [`maps`](Options::maps) and the word's offset in its value (a multiple of
    /// 8). A load from that word (or a part of it) reads the register: no memory access, and
    /// no wait for one before the code that depends on it. For a one-slot array that no probe
    /// of the kernel writes (a configuration, such as the far tier's): what host code writes
    /// there while a kernel runs reaches the threads that start after it.
    pub invariants: Vec<(u32, u32, String)>,
    /// The SM's rated clock in kHz (`CU_DEVICE_ATTRIBUTE_CLOCK_RATE`): `egpu_delay_ns` then
    /// counts its wait in `%clock64` cycles (read in a cycle or two, and exact) at that rate.
    /// `None`: on `%globaltimer`, whose steps (32 ns on the H200) round each wait.
    pub sm_clock_khz: Option<u32>,
    /// At an access ([`Context::Access`]) whose probe counts by a key its lookup cache
    /// remembers ([`Counts`]): a key in neither cached entry is kept here, not searched for
    /// (`defer.rs`), when the probe allows it; [`Translation::deferred`] says whether it did.
    pub defer: Option<super::Defer>,
}

/// Where a thread remembers its last hit in a hash map ([`Options::lookup_cache`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupCache {
    /// The key remembered.
    pub key: CacheKey,
    /// A 64-bit register of the kernel: the value's address, 0 when none is remembered.
    pub value: String,
    /// With a key of [`CacheKey::Constant`]: per 8-byte field of the value (by its offset), a
    /// 64-bit register of the kernel that holds the thread's combined adds
    /// ([`combines`](super::combines)) to that field not yet in memory. Such an add is one
    /// register add, with no compare: every value of the map the probes reach is the kernel
    /// id's, at `value` (or, for a map spread over per-SM copies, that value's copy of the
    /// thread's SM). The kernel starts them at 0 and adds them there when it exits. Adds to
    /// other fields, or with no sums, go through [`Options::combine`]'s slots.
    pub sums: Vec<(u32, String)>,
    /// With a key of [`CacheKey::Register`] or [`CacheKey::Second`]: two more 64-bit registers
    /// of the kernel, the key word and the value's address of the hit before the last, tried
    /// when the last misses (a thread whose accesses alternate between two pages, a loop's
    /// loads of `x` and `y`, then finds both). The kernel starts them at 0.
    pub previous: Option<(String, String)>,
    /// With `previous`: the thread's adds to the two values remembered, combined in registers
    /// ([`Counts`]).
    pub counts: Option<Counts>,
}

/// The thread's adds to the values a [`LookupCache`] with a `previous` entry remembers, not yet
/// in memory: a count by (kernel, page), the `pages` set's. An add of a number to field
/// `field` of either value is a register add; at a search's hit, which evicts the entry before
/// the last, that entry's sum goes to memory (aggregated across the warp) and the last's becomes
/// the one before; the kernel adds both when the thread exits. Where a probe's lookup is
/// followed by its null test, a `mov` of a number and an add of it to the field found, and
/// either entry holds the key, the thread adds the number to its sum and goes on past the add:
/// a few instructions with no search, no vote of the lanes' addresses and no atomic. Only for
/// maps whose values the probes only add to ([`adds_only`](super::adds_only)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    /// The offset of the 8-byte field added to.
    pub field: u32,
    /// A 64-bit register of the kernel: the sum of the last hit's value.
    pub last: String,
    /// A 64-bit register of the kernel: the sum of the value of the hit before.
    pub previous: String,
}

/// The key a [`LookupCache`] remembers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheKey {
    /// A 64-bit register of the kernel: the key of the last hit.
    Register(String),
    /// Only this key (the kernel's id, by which the probes look the map up): a lookup compares
    /// its key with a constant, which the JIT folds when the key is one too, and the cache needs
    /// no key register.
    Constant(u64),
    /// A key of two words whose first is always this constant (the kernel's id: the `pages`
    /// set's (kernel, page)), and a 64-bit register of the kernel with the second word of the
    /// last hit: a lookup compares its first word with the constant and its second with the
    /// register.
    Second {
        /// The first word of every key remembered.
        first: u64,
        /// The register with the second word of the last hit.
        second: String,
    },
    /// Nothing (another key of more than a word, whose registers would cost a kernel more than
    /// the searches they save): the entries still stay put, so a search reads the key's home
    /// slot from the SM's L1 cache first, as every search of a map with a cache does.
    Nothing,
}

/// A map as the GPU sees it: the device address of its memory (header included) and its
/// geometry, which the translation bakes into the code as constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMap {
    /// Device address of the map's first byte.
    pub addr: u64,
    /// Its layout.
    pub geometry: Geometry,
    /// Whether the map is pinned host memory that host code or another process reads live,
    /// while kernels write it: its atomics then have system scope. Ring buffers cannot be read
    /// live yet (refused).
    pub live: bool,
    /// 0, or the number (a power of two, at most 1024) of copies of the map's slots that follow
    /// its memory, one per group of SMs: the program's atomic adds to the map's values then go
    /// to the copy of the thread's SM (`%smid % spread`), at the same place in it, so that a
    /// whole GPU's adds to one counter do not queue at one address. Only for a hash map or an
    /// array in GPU memory whose values the probes only add to ([`adds_only`](super::adds_only)),
    /// whose reader sums the copies into the map (`egpu_maps::merge::DevicePart::spread`).
    pub spread: u32,
    /// Only for a ring buffer in GPU memory: whether its host drains it while kernels run
    /// (`egpu_maps::merge::DevicePart`, the preloaded library's device parts) rather than
    /// reading it after the kernel. Device producers then claim room before they take tickets,
    /// and publish each group of records with release ordering (a fence per group); otherwise
    /// they only take tickets and write the records, which the host publishes after the kernel
    /// (`egpu_maps::RawMap::commit_written_records`).
    pub drained: bool,
}

impl Options {
    /// Options with the given prefix and context, no result register and pid 0.
    pub fn new(prefix: impl Into<String>, context: Context) -> Options {
        Options {
            prefix: prefix.into(),
            context,
            result: None,
            pid: 0,
            maps: Vec::new(),
            combine: None,
            sm: 90,
            smid: None,
            tag: None,
            lookup_cache: Vec::new(),
            ring_batches: Vec::new(),
            outline: None,
            invariants: Vec::new(),
            sm_clock_khz: None,
            defer: None,
        }
    }
}

/// A translated program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// Module-level definitions (the local functions), to place before the function that holds
    /// [`body`](Translation::body). Empty for programs without local calls.
    pub functions: String,
    /// The main function: one `{ … }` block, to place where the probe runs.
    pub body: String,
    /// Module-level functions shared with other translations into the same module (with the
    /// same [`Options::outline`] prefix), by name: a function of a name is the same text in
    /// every translation, so a module defines each name once, before any function that calls
    /// it. Empty without [`Options::outline`].
    pub shared: BTreeMap<String, String>,
    /// Whether a miss was deferred ([`Options::defer`]): the caller runs the program again
    /// where the thread's straight line of code ends, for the bit set.
    pub deferred: bool,
}
