//! Attach points and the context each one hands a probe in `r1`.
//!
//! Every context is a `#[repr(C)]` struct without padding ([`bytemuck::Pod`]), so the CPU VM,
//! native Rust and the GPU translation see the same bytes. On the GPU a context load becomes the
//! register or special register that holds the field (`%tid`, `%ctaid`, `%smid`, …), so a field a
//! probe does not read costs nothing. Fields marked *exit only* are zero in enter probes.
//!
//! # How contexts evolve
//!
//! Contexts are an ABI: Probe Rust reads their fields by offset, the CPU VM and the verifier know
//! their sizes, the PTX translator maps each device field to the register that holds it, and other
//! tools (a C header, probes compiled by clang) will hard-code the same offsets. So:
//!
//! - **Append only.** A field never moves, changes type or goes away. A new field is added at the
//!   end (the context grows, always to a multiple of 8 bytes), or takes a `reserved` word, whose
//!   value until then was zero, when zero also means "not known" for the new field.
//! - **The size is the version.** A program is verified against the context size of its attach
//!   point ([`AttachPoint::context_size`]); one built for an older, shorter context runs unchanged
//!   on a newer engine, and one that reads a newer field is refused (`context-bounds`) by an
//!   engine that does not have it, before it runs. [`CONTEXT_REVISION`] counts these changes.
//! - **Known before filled.** A field may exist before anything fills it: it reads as zero until
//!   then, on every side (the device translation turns such a field into the constant 0).
//! - **Host contexts carry a tag** ([`context_tag`]): which event and revision the bytes are, so a
//!   context copied out of a probe (into a ring, another process, a trace file) says what it is.
//!   `Default` fills it; every egpu producer builds contexts from `Default`.
//! - **New events are new attach points** (a name, a context struct); an attach point's context
//!   never changes to another struct.
//! - **Hot fields first.** What a probe on a hot host event reads most (`LaunchCtx`'s kernel id,
//!   flags, grid and block) stays in the first 64 bytes, one cache line.

use bytemuck::Zeroable;
use std::fmt;

use crate::fields::{self, ContextType};

/// The id of a kernel: the 64-bit FNV-1a hash of its mangled name, the same in every process
/// and on every side (host launch contexts, device contexts, maps keyed by kernel).
///
/// ```
/// assert_eq!(egpu_ebpf::kernel_id(""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(egpu_ebpf::kernel_id("saxpy"), egpu_ebpf::kernel_id("saxpy"));
/// assert_ne!(egpu_ebpf::kernel_id("saxpy"), egpu_ebpf::kernel_id("saxpz"));
/// ```
pub const fn kernel_id(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The revision of the contexts' layout: 1 for the first layout, one more with every change that
/// adds fields (see the module documentation). It is part of every host context's [`tag`](context_tag).
pub const CONTEXT_REVISION: u32 = 6;

/// The tag word of `event`'s host context: `0xEC` in the top byte, then [`CONTEXT_REVISION`] (16
/// bits), then the event (8 bits: launch 1, memcpy 2, alloc 3, sync 4, module load 5).
///
/// ```
/// use egpu_ebpf::{HostEvent, LaunchCtx, context_tag};
/// assert_eq!(LaunchCtx::default().tag, context_tag(HostEvent::Launch));
/// assert_eq!(context_tag(HostEvent::Launch) >> 24, 0xec);
/// ```
pub const fn context_tag(event: HostEvent) -> u32 {
    let number = match event {
        HostEvent::Launch => 1,
        HostEvent::Memcpy => 2,
        HostEvent::Alloc => 3,
        HostEvent::Sync => 4,
        HostEvent::ModuleLoad => 5,
    };
    0xec00_0000 | (CONTEXT_REVISION & 0xffff) << 8 | number
}

/// Where a program runs, and so which context it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachPoint {
    /// A CUDA API call on the host, before (`Enter`) or after (`Exit`) the call.
    Host(HostEvent, Phase),
    /// An event inside a CUDA kernel.
    Device(DeviceEvent),
    /// An event defined by the user, with an opaque context of `ctx_size` bytes.
    User {
        /// Size of the context in bytes.
        ctx_size: u32,
    },
}

/// CUDA API calls that host probes attach to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostEvent {
    /// Kernel launches ([`LaunchCtx`]).
    Launch,
    /// Memory copies and sets ([`MemcpyCtx`]).
    Memcpy,
    /// Allocations and frees ([`AllocCtx`]).
    Alloc,
    /// Synchronisation ([`SyncCtx`]).
    Sync,
    /// Module loads ([`ModuleLoadCtx`]).
    ModuleLoad,
}

/// Before or after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Before the call: arguments only.
    Enter,
    /// After the call: the result and the time spent are filled in.
    Exit,
}

/// Events inside a kernel that device probes attach to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceEvent {
    /// Each thread entering the kernel ([`KernelCtx`]).
    KernelEntry,
    /// Each thread leaving the kernel ([`KernelCtx`]).
    KernelExit,
    /// Each global load ([`MemAccessCtx`]).
    GlobalLoad,
    /// Each global store ([`MemAccessCtx`]).
    GlobalStore,
    /// Each atomic operation on global memory ([`MemAccessCtx`], of class
    /// [`MemAccessCtx::ATOMIC`]).
    GlobalAtomic,
}

impl AttachPoint {
    /// Every attach point of a CUDA event, in the order `egpu list` prints them: each host event's
    /// entry and exit, then the device events. (A user attach point takes its size: `user(N)`.)
    pub const EVENTS: [AttachPoint; 15] = {
        use AttachPoint::{Device, Host};
        use {DeviceEvent::*, HostEvent::*, Phase::*};
        [
            Host(Launch, Enter),
            Host(Launch, Exit),
            Host(Memcpy, Enter),
            Host(Memcpy, Exit),
            Host(Alloc, Enter),
            Host(Alloc, Exit),
            Host(Sync, Enter),
            Host(Sync, Exit),
            Host(ModuleLoad, Enter),
            Host(ModuleLoad, Exit),
            Device(KernelEntry),
            Device(KernelExit),
            Device(GlobalLoad),
            Device(GlobalStore),
            Device(GlobalAtomic),
        ]
    };

    /// The context this attach point passes, with its field table; `None` for a user attach
    /// point, whose context is the caller's own bytes.
    pub const fn context_type(self) -> Option<&'static ContextType> {
        Some(match self {
            AttachPoint::Host(HostEvent::Launch, _) => &LaunchCtx::TYPE,
            AttachPoint::Host(HostEvent::Memcpy, _) => &MemcpyCtx::TYPE,
            AttachPoint::Host(HostEvent::Alloc, _) => &AllocCtx::TYPE,
            AttachPoint::Host(HostEvent::Sync, _) => &SyncCtx::TYPE,
            AttachPoint::Host(HostEvent::ModuleLoad, _) => &ModuleLoadCtx::TYPE,
            AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
                &KernelCtx::TYPE
            }
            AttachPoint::Device(
                DeviceEvent::GlobalLoad | DeviceEvent::GlobalStore | DeviceEvent::GlobalAtomic,
            ) => &MemAccessCtx::TYPE,
            AttachPoint::User { .. } => return None,
        })
    }

    /// Size in bytes of the context this attach point passes.
    pub const fn context_size(self) -> usize {
        match (self, self.context_type()) {
            (AttachPoint::User { ctx_size }, _) => ctx_size as usize,
            (_, Some(context)) => context.size,
            (_, None) => 0,
        }
    }

    /// Name of the context type, for messages.
    pub const fn context_name(self) -> &'static str {
        match self.context_type() {
            Some(context) => context.name,
            None => "user context",
        }
    }

    /// How `#[egpu::probe]` writes this attach point: `host::launch` for a call's entry,
    /// `host::launch::exit`, `device::global_load`, `user(16)`. Every spelling parses back
    /// ([`FromStr`](std::str::FromStr)); [`Display`](fmt::Display) writes the entry's phase too.
    pub fn spelling(self) -> String {
        match self {
            AttachPoint::Host(_, Phase::Enter) => {
                let full = self.to_string();
                full.strip_suffix("::enter").unwrap_or(&full).to_string()
            }
            AttachPoint::User { ctx_size } => format!("user({ctx_size})"),
            _ => self.to_string(),
        }
    }

    /// When a probe at this attach point runs, in a line.
    pub const fn describe(self) -> &'static str {
        use {DeviceEvent::*, HostEvent::*, Phase::*};
        match self {
            AttachPoint::Host(Launch, Enter) => {
                "before a kernel launch (cuLaunchKernel, cuLaunchKernelEx, cuGraphLaunch)"
            }
            AttachPoint::Host(Launch, Exit) => "after a kernel launch returns",
            AttachPoint::Host(Memcpy, Enter) => {
                "before a memory copy or set (cuMemcpy*, cudaMemcpy*, cuMemset*, cudaMemset*)"
            }
            AttachPoint::Host(Memcpy, Exit) => "after a memory copy or set returns",
            AttachPoint::Host(Alloc, Enter) => {
                "before an allocation or free (cuMemAlloc*, cudaMalloc*, cuMemFree*, cudaFree*)"
            }
            AttachPoint::Host(Alloc, Exit) => "after an allocation or free returns",
            AttachPoint::Host(Sync, Enter) => {
                "before a synchronisation (cuStreamSynchronize, cuEventSynchronize, \
                 cuCtxSynchronize)"
            }
            AttachPoint::Host(Sync, Exit) => "after a synchronisation returns",
            AttachPoint::Host(ModuleLoad, Enter) => {
                "before a module load (cuModuleLoadData*, cuModuleLoadFatBinary, \
                 cuLibraryLoadData)"
            }
            AttachPoint::Host(ModuleLoad, Exit) => "after a module load returns",
            AttachPoint::Device(KernelEntry) => "each thread entering an instrumented kernel",
            AttachPoint::Device(KernelExit) => "each thread leaving an instrumented kernel",
            AttachPoint::Device(GlobalLoad) => {
                "each thread's read of global memory: ld, ldu (global or generic), cp.async, \
                 cp.async.bulk and tensor copies to shared memory"
            }
            AttachPoint::Device(GlobalStore) => {
                "each thread's write of global memory: st (global or generic), cp.async.bulk \
                 and tensor copies from shared memory, their reductions, tensor map writes"
            }
            AttachPoint::Device(GlobalAtomic) => {
                "each thread's atomic on global memory: atom, red (global or generic)"
            }
            AttachPoint::User { .. } => "when the program that owns it runs it, on its buffer",
        }
    }

    /// Whether programs may write the context. A user context is the caller's own buffer; the
    /// contexts of CUDA events are read-only (on the GPU their fields are registers).
    pub const fn context_writable(self) -> bool {
        matches!(self, AttachPoint::User { .. })
    }

    /// Whether the program runs on the GPU.
    pub const fn is_device(self) -> bool {
        matches!(self, AttachPoint::Device(_))
    }
}

impl fmt::Display for AttachPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachPoint::Host(event, phase) => {
                let event = match event {
                    HostEvent::Launch => "launch",
                    HostEvent::Memcpy => "memcpy",
                    HostEvent::Alloc => "alloc",
                    HostEvent::Sync => "sync",
                    HostEvent::ModuleLoad => "module_load",
                };
                let phase = match phase {
                    Phase::Enter => "enter",
                    Phase::Exit => "exit",
                };
                write!(f, "host::{event}::{phase}")
            }
            AttachPoint::Device(event) => f.write_str(match event {
                DeviceEvent::KernelEntry => "device::kernel_entry",
                DeviceEvent::KernelExit => "device::kernel_exit",
                DeviceEvent::GlobalLoad => "device::global_load",
                DeviceEvent::GlobalStore => "device::global_store",
                DeviceEvent::GlobalAtomic => "device::global_atomic",
            }),
            AttachPoint::User { ctx_size } => write!(f, "user({ctx_size} bytes)"),
        }
    }
}

/// An attach point that [`AttachPoint::from_str`](std::str::FromStr::from_str) does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown attach point `{0}` (host::EVENT, or host::EVENT::exit, with EVENT launch, memcpy, \
     alloc, sync or module_load; device::kernel_entry, kernel_exit, global_load, global_store or \
     global_atomic; user(N))"
)]
pub struct ParseAttachError(pub String);

impl std::str::FromStr for AttachPoint {
    type Err = ParseAttachError;

    /// Parses what [`Display`](fmt::Display) writes (`host::launch::enter`,
    /// `device::global_load`, `user(16 bytes)`), and the spellings of `#[egpu::probe]`:
    /// `host::launch` (the call's entry, `host::launch::enter`), `user(16)`. (The macro's bare
    /// `user` takes its size from the probe's context type, which a string does not have.)
    fn from_str(s: &str) -> Result<AttachPoint, ParseAttachError> {
        let err = || ParseAttachError(s.to_string());
        let t = s.trim();
        if let Some(rest) = t.strip_prefix("user(").and_then(|r| r.strip_suffix(')')) {
            let n = rest.trim().trim_end_matches("bytes").trim();
            return n.parse().map(|ctx_size| AttachPoint::User { ctx_size }).map_err(|_| err());
        }
        let parts: Vec<&str> = t.split("::").collect();
        Ok(match parts.as_slice() {
            ["host", event] => return format!("host::{event}::enter").parse().map_err(|_| err()),
            ["host", event, phase] => {
                let event = match *event {
                    "launch" => HostEvent::Launch,
                    "memcpy" => HostEvent::Memcpy,
                    "alloc" => HostEvent::Alloc,
                    "sync" => HostEvent::Sync,
                    "module_load" => HostEvent::ModuleLoad,
                    _ => return Err(err()),
                };
                let phase = match *phase {
                    "enter" => Phase::Enter,
                    "exit" => Phase::Exit,
                    _ => return Err(err()),
                };
                AttachPoint::Host(event, phase)
            }
            ["device", event] => AttachPoint::Device(match *event {
                "kernel_entry" => DeviceEvent::KernelEntry,
                "kernel_exit" => DeviceEvent::KernelExit,
                "global_load" => DeviceEvent::GlobalLoad,
                "global_store" => DeviceEvent::GlobalStore,
                "global_atomic" => DeviceEvent::GlobalAtomic,
                _ => return Err(err()),
            }),
            _ => return Err(err()),
        })
    }
}

fields::contexts! {
    /// Context of a kernel launch (`cuLaunchKernel`, `cudaLaunchKernel`, graph launches).
    pub struct LaunchCtx {
        /// 64-bit hash of the kernel's mangled name, stable across processes.
        pub kernel_id: u64,
        /// The `CUfunction` handle.
        pub function: u64,
        /// The stream (`CUstream`), 0 for the legacy default stream.
        pub stream: u64,
        /// Host monotonic clock at the call, in ns.
        pub timestamp_ns: u64,
        /// [`LaunchCtx::CAPTURED`], [`LaunchCtx::GRAPH`].
        pub flags: u32,
        /// Dynamic shared memory per block, in bytes.
        pub shared_mem_bytes: u32,
        /// Grid size in blocks (x, y, z).
        pub grid: [u32; 3],
        /// Block size in threads (x, y, z).
        pub block: [u32; 3],
        /// CUDA device ordinal.
        pub device: u32,
        /// Host thread id (`gettid`).
        pub host_tid: u32,
        /// Exit only: the call's `CUresult`.
        pub result: i32,
        /// [`context_tag`]`(HostEvent::Launch)`.
        pub tag: u32,
        /// Exit only: host time spent in the call, in ns.
        pub duration_ns: u64,
        /// The launch site this call was made from: the id of its stack, interned in the
        /// process's site table (`egpu-<pid>-sites`), when launch sites are captured
        /// (`EGPU_SITES`) and this call was sampled; 0 otherwise.
        pub site_id: u64,
        /// The request or job the program said this work belongs to (`egpu_tag_set`), 0 for
        /// none.
        pub tag_id: u64,
        /// The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high
        /// 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none.
        pub trace_id: [u64; 2],
        /// The W3C trace context's parent span id the program set, 0 for none.
        pub span_id: u64,
    }
}

impl LaunchCtx {
    /// The launch was recorded into a graph under stream capture.
    pub const CAPTURED: u32 = 1;
    /// A graph launch (`cuGraphLaunch`); grid and block are zero.
    pub const GRAPH: u32 = 2;
}

fields::contexts! {
    /// Context of a memory copy or set (`cuMemcpy*`, `cudaMemcpy*`, `cuMemset*`).
    pub struct MemcpyCtx {
        /// Destination address.
        pub dst: u64,
        /// Source address (0 for sets).
        pub src: u64,
        /// Bytes copied or set.
        pub bytes: u64,
        /// The stream, 0 for synchronous copies.
        pub stream: u64,
        /// Host monotonic clock at the call, in ns.
        pub timestamp_ns: u64,
        /// Exit only: host time spent in the call, in ns.
        pub duration_ns: u64,
        /// One of the `MemcpyCtx::*` kinds: [`MemcpyCtx::HOST_TO_DEVICE`], …
        pub kind: u32,
        /// CUDA device ordinal.
        pub device: u32,
        /// Host thread id.
        pub host_tid: u32,
        /// Exit only: the call's `CUresult`.
        pub result: i32,
        /// [`MemcpyCtx::ASYNC`], [`MemcpyCtx::MEMSET`].
        pub flags: u32,
        /// [`context_tag`]`(HostEvent::Memcpy)`.
        pub tag: u32,
        /// The launch site this call was made from: the id of its stack, interned in the
        /// process's site table (`egpu-<pid>-sites`), when launch sites are captured
        /// (`EGPU_SITES`) and this call was sampled; 0 otherwise.
        pub site_id: u64,
        /// The request or job the program said this work belongs to (`egpu_tag_set`), 0 for
        /// none.
        pub tag_id: u64,
        /// The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high
        /// 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none.
        pub trace_id: [u64; 2],
        /// The W3C trace context's parent span id the program set, 0 for none.
        pub span_id: u64,
        /// A copy between devices ([`MemcpyCtx::PEER`]): the source's CUDA device ordinal (the
        /// context it names, for the driver's `cuMemcpyPeer`); 0 for other copies, whose device
        /// is `device`.
        pub src_device: u32,
        /// A copy between devices: the destination's CUDA device ordinal; 0 for other copies.
        pub dst_device: u32,
    }
}

impl MemcpyCtx {
    /// Direction unknown or inferred by unified addressing.
    pub const DEFAULT: u32 = 0;
    /// Host to device.
    pub const HOST_TO_DEVICE: u32 = 1;
    /// Device to host.
    pub const DEVICE_TO_HOST: u32 = 2;
    /// Device to device.
    pub const DEVICE_TO_DEVICE: u32 = 3;
    /// Between two devices.
    pub const PEER: u32 = 4;
    /// Host to host.
    pub const HOST_TO_HOST: u32 = 5;
    /// The call is asynchronous.
    pub const ASYNC: u32 = 1;
    /// A memory set rather than a copy.
    pub const MEMSET: u32 = 2;
}

fields::contexts! {
    /// Context of an allocation or a free.
    pub struct AllocCtx {
        /// The address allocated (exit) or freed.
        pub ptr: u64,
        /// Bytes allocated (0 for frees when unknown).
        pub bytes: u64,
        /// Host monotonic clock at the call, in ns.
        pub timestamp_ns: u64,
        /// Exit only: host time spent in the call, in ns.
        pub duration_ns: u64,
        /// [`AllocCtx::DEVICE`], [`AllocCtx::HOST_PINNED`] or [`AllocCtx::MANAGED`].
        pub kind: u32,
        /// [`AllocCtx::ALLOC`] or [`AllocCtx::FREE`].
        pub op: u32,
        /// CUDA device ordinal.
        pub device: u32,
        /// Host thread id.
        pub host_tid: u32,
        /// Exit only: the call's `CUresult`.
        pub result: i32,
        /// [`context_tag`]`(HostEvent::Alloc)`.
        pub tag: u32,
        /// The launch site this call was made from: the id of its stack, interned in the
        /// process's site table (`egpu-<pid>-sites`), when launch sites are captured
        /// (`EGPU_SITES`) and this call was sampled; 0 otherwise.
        pub site_id: u64,
        /// The request or job the program said this work belongs to (`egpu_tag_set`), 0 for
        /// none.
        pub tag_id: u64,
        /// The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high
        /// 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none.
        pub trace_id: [u64; 2],
        /// The W3C trace context's parent span id the program set, 0 for none.
        pub span_id: u64,
    }
}

impl AllocCtx {
    /// Device memory.
    pub const DEVICE: u32 = 0;
    /// Page-locked host memory.
    pub const HOST_PINNED: u32 = 1;
    /// Managed (unified) memory.
    pub const MANAGED: u32 = 2;
    /// An allocation.
    pub const ALLOC: u32 = 0;
    /// A free.
    pub const FREE: u32 = 1;
}

fields::contexts! {
    /// Context of a synchronisation call.
    pub struct SyncCtx {
        /// The stream or event waited on, 0 for context and device synchronisation.
        pub handle: u64,
        /// Host monotonic clock at the call, in ns.
        pub timestamp_ns: u64,
        /// Exit only: host time spent in the call, in ns.
        pub duration_ns: u64,
        /// [`SyncCtx::STREAM`], [`SyncCtx::EVENT`], [`SyncCtx::CONTEXT`] or [`SyncCtx::DEVICE`].
        pub kind: u32,
        /// CUDA device ordinal.
        pub device: u32,
        /// Host thread id.
        pub host_tid: u32,
        /// Exit only: the call's `CUresult`.
        pub result: i32,
        /// [`context_tag`]`(HostEvent::Sync)`.
        pub tag: u32,
        /// Zero.
        pub reserved: u32,
    }
}

impl SyncCtx {
    /// Stream synchronisation.
    pub const STREAM: u32 = 0;
    /// Event synchronisation.
    pub const EVENT: u32 = 1;
    /// Context synchronisation.
    pub const CONTEXT: u32 = 2;
    /// Device synchronisation.
    pub const DEVICE: u32 = 3;
}

fields::contexts! {
    /// Context of a module load.
    pub struct ModuleLoadCtx {
        /// The module handle (exit).
        pub module: u64,
        /// Size of the image loaded, in bytes (0 when unknown).
        pub image_bytes: u64,
        /// Host monotonic clock at the call, in ns.
        pub timestamp_ns: u64,
        /// Exit only: host time spent in the call, in ns.
        pub duration_ns: u64,
        /// 1 when the image carries PTX that can be instrumented.
        pub has_ptx: u32,
        /// 1 when egpu instrumented it.
        pub instrumented: u32,
        /// CUDA device ordinal.
        pub device: u32,
        /// Host thread id.
        pub host_tid: u32,
        /// Exit only: the call's `CUresult`.
        pub result: i32,
        /// [`context_tag`]`(HostEvent::ModuleLoad)`.
        pub tag: u32,
    }
}

impl Default for LaunchCtx {
    /// Zero, but for the [tag](context_tag).
    fn default() -> Self {
        LaunchCtx { tag: context_tag(HostEvent::Launch), ..Zeroable::zeroed() }
    }
}

impl Default for MemcpyCtx {
    /// Zero, but for the [tag](context_tag).
    fn default() -> Self {
        MemcpyCtx { tag: context_tag(HostEvent::Memcpy), ..Zeroable::zeroed() }
    }
}

impl Default for AllocCtx {
    /// Zero, but for the [tag](context_tag).
    fn default() -> Self {
        AllocCtx { tag: context_tag(HostEvent::Alloc), ..Zeroable::zeroed() }
    }
}

impl Default for SyncCtx {
    /// Zero, but for the [tag](context_tag).
    fn default() -> Self {
        SyncCtx { tag: context_tag(HostEvent::Sync), ..Zeroable::zeroed() }
    }
}

impl Default for ModuleLoadCtx {
    /// Zero, but for the [tag](context_tag).
    fn default() -> Self {
        ModuleLoadCtx { tag: context_tag(HostEvent::ModuleLoad), ..Zeroable::zeroed() }
    }
}

fields::contexts! {
    /// Context of a kernel's entry and exit, one per thread.
    pub struct KernelCtx {
        /// 64-bit hash of the kernel's mangled name.
        pub kernel_id: u64,
        /// Thread index in the block (`%tid`).
        pub thread: [u32; 3],
        /// Block index in the grid (`%ctaid`).
        pub block: [u32; 3],
        /// Block size (`%ntid`).
        pub block_dim: [u32; 3],
        /// Grid size (`%nctaid`).
        pub grid_dim: [u32; 3],
        /// Warp index in the block: the linear thread index divided by 32.
        pub warp: u32,
        /// Lane in the warp (`%laneid`).
        pub lane: u32,
        /// Streaming multiprocessor (`%smid`).
        pub sm: u32,
        /// The CUDA device ordinal (0 until launches fill it).
        pub device: u32,
        /// Which launch this thread runs in: on the GPU, `%gridid`, the number the GPU gives each
        /// grid it starts in a context (the same for every thread of the launch, different for
        /// every launch of the context, whichever kernel, and growing with them; a CUDA graph's
        /// kernel node keeps one for all its replays). On the CPU VM, what the caller puts.
        pub launch_id: u64,
        /// The request or job the launch belongs to: the launching thread's tag id
        /// (`egpu_tag_set`, as the launch context's `tag_id`), 0 for none. On the GPU, a hidden
        /// parameter the injector appends to the kernel and the preloaded library fills at each
        /// launch (a graph's kernel node: when it was captured or made); 0 in device functions
        /// and where nothing fills it. On the CPU VM, what the caller puts.
        pub tag_id: u64,
    }
}

fields::contexts! {
    /// Context of an access to global memory, one per thread and access: a load, a store or an
    /// atomic, of a class ([`MemAccessCtx::class`]).
    pub struct MemAccessCtx {
        /// The address accessed.
        pub addr: u64,
        /// 64-bit hash of the kernel's mangled name.
        pub kernel_id: u64,
        /// Bytes accessed.
        pub size: u32,
        /// Index of the access among the kernel's observed accesses.
        pub site: u32,
        /// Thread index in the block (`%tid`).
        pub thread: [u32; 3],
        /// Block index in the grid (`%ctaid`).
        pub block: [u32; 3],
        /// Warp index in the block.
        pub warp: u32,
        /// Lane in the warp (`%laneid`).
        pub lane: u32,
        /// Streaming multiprocessor (`%smid`).
        pub sm: u32,
        /// 1 when the access writes global memory (a store, a copy or reduction to global
        /// memory, an atomic), 0 when it only reads it.
        pub is_store: u32,
        /// Which launch the access is in: `%gridid` on the GPU (see [`KernelCtx::launch_id`]).
        pub launch_id: u64,
        /// The CUDA device ordinal (0 until launches fill it).
        pub device: u32,
        /// The class of instruction that made the access: [`MemAccessCtx::LOAD_STORE`],
        /// [`MemAccessCtx::ATOMIC`], [`MemAccessCtx::ASYNC_COPY`], [`MemAccessCtx::BULK_COPY`],
        /// [`MemAccessCtx::TENSOR_COPY`] or [`MemAccessCtx::TENSOR_MAP`].
        pub class: u32,
        /// For an atomic or a reduction (`atom`, `red`, `cp.reduce.async.bulk`), the operation:
        /// [`MemAccessCtx::OP_ADD`] and the next numbers; 0 otherwise.
        pub op: u32,
        /// 1 for an atomic that returns the old value (`atom`), 0 otherwise (`red`, and every
        /// access that is not an atomic).
        pub fetch: u32,
        /// The request or job the launch belongs to, 0 for none (see [`KernelCtx::tag_id`]).
        pub tag_id: u64,
    }
}

impl Default for KernelCtx {
    /// Zero.
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

impl Default for MemAccessCtx {
    /// Zero.
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

impl MemAccessCtx {
    /// `ld`, `ldu` or `st`: `size` bytes at `addr`.
    pub const LOAD_STORE: u32 = 0;
    /// `atom` or `red` (at `device::global_atomic`): `size` bytes at `addr`, the operation in
    /// `op`.
    pub const ATOMIC: u32 = 1;
    /// `cp.async` (at `device::global_load`): `size` bytes read at `addr` into shared memory,
    /// the bytes the instruction reads (its `src-size` when it has one, 0 when `ignore-src`
    /// holds), which may be fewer than it writes.
    pub const ASYNC_COPY: u32 = 2;
    /// `cp.async.bulk` between global and shared memory (at `device::global_load` or
    /// `device::global_store`), and `cp.reduce.async.bulk` to global memory (a store with `op`):
    /// `size` bytes at `addr`, for the one thread that issues it.
    pub const BULK_COPY: u32 = 3;
    /// `cp.async.bulk.tensor` and `cp.reduce.async.bulk.tensor` (the tensor memory accelerator):
    /// `addr` is the tensor map's address, not the data's, and `size` is 0: the box is in the
    /// tensor map, not in the instruction.
    pub const TENSOR_COPY: u32 = 4;
    /// A write of a tensor map in global memory (at `device::global_store`):
    /// `tensormap.cp_fenceproxy` (the map, `size` bytes, copied from shared memory) or
    /// `tensormap.replace.global` (one field of `size` bytes).
    pub const TENSOR_MAP: u32 = 5;

    /// `op`: add.
    pub const OP_ADD: u32 = 1;
    /// `op`: minimum.
    pub const OP_MIN: u32 = 2;
    /// `op`: maximum.
    pub const OP_MAX: u32 = 3;
    /// `op`: increment (wrapping at the operand).
    pub const OP_INC: u32 = 4;
    /// `op`: decrement (wrapping at the operand).
    pub const OP_DEC: u32 = 5;
    /// `op`: bitwise and.
    pub const OP_AND: u32 = 6;
    /// `op`: bitwise or.
    pub const OP_OR: u32 = 7;
    /// `op`: bitwise exclusive or.
    pub const OP_XOR: u32 = 8;
    /// `op`: exchange.
    pub const OP_EXCH: u32 = 9;
    /// `op`: compare and swap.
    pub const OP_CAS: u32 = 10;

    /// A class's name, for people: `load/store`, `atomic`, `async copy`, `bulk copy`,
    /// `tensor copy`, `tensor map`; `unknown` for a number no class has.
    pub const fn class_name(class: u32) -> &'static str {
        match class {
            Self::LOAD_STORE => "load/store",
            Self::ATOMIC => "atomic",
            Self::ASYNC_COPY => "async copy",
            Self::BULK_COPY => "bulk copy",
            Self::TENSOR_COPY => "tensor copy",
            Self::TENSOR_MAP => "tensor map",
            _ => "unknown",
        }
    }

    /// The operation named by a PTX qualifier (`add`, `cas`, …), if it is one.
    pub fn op_of(qualifier: &str) -> Option<u32> {
        Some(match qualifier {
            "add" => Self::OP_ADD,
            "min" => Self::OP_MIN,
            "max" => Self::OP_MAX,
            "inc" => Self::OP_INC,
            "dec" => Self::OP_DEC,
            "and" => Self::OP_AND,
            "or" => Self::OP_OR,
            "xor" => Self::OP_XOR,
            "exch" => Self::OP_EXCH,
            "cas" => Self::OP_CAS,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests;
