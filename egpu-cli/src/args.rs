//! The command line's grammar: clap's derive types, and the parsers of the values egpu's flags
//! take (attach points, maps, durations, addresses, process ids). A value that does not parse is
//! a usage error, reported by clap with the flag, the value and why, and exit status 2.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use egpu::ebpf::{AttachPoint, MapDef, MapKind, ParseMapDefError};
use egpu_device::translate::DeviceMap;
use egpu_maps::layout::Geometry;

/// What the help says after the list of subcommands.
const AFTER_HELP: &str = "\
A PROGRAM is a file: eBPF assembly (.s, bpf_conformance's syntax), bytecode (little-endian
8-byte instructions), or a probe pack (a pack's text, or a shared library made with
egpu::export_probes!) with PACK:NAME naming one of its probes.

`egpu help SUBCOMMAND` or `egpu SUBCOMMAND --help` says more.";

/// eBPF probes for NVIDIA GPUs: see what a probe becomes in a kernel, inject probes into PTX, run
/// unmodified CUDA programs under egpu's preloaded library and read their maps.
#[derive(Debug, Parser)]
#[command(name = "egpu", version, after_help = AFTER_HELP)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print a PTX module whose kernel runs a program once per thread.
    Translate(TranslateArgs),
    /// Inject probes into a PTX module at their attach points.
    Inject(InjectArgs),
    /// Run a command under egpu's preloaded library, which counts its CUDA calls.
    Run(RunArgs),
    /// List the processes with egpu maps in shared memory, or print one process's maps.
    Maps(MapsArgs),
    /// Measure the memory traffic and GPU time of a command's kernels.
    #[command(subcommand)]
    Mem(MemCommand),
    /// Run a command with part of its GPU memory in an emulated slower tier (CXL.mem)
    Cxl(CxlArgs),
    /// List the attach points with their contexts, and the helpers (as `bpftrace -l`).
    List(ListArgs),
    /// Print a completion script for a shell (`egpu completions bash`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `egpu translate`.
#[derive(Debug, Args)]
#[command(after_help = "\
ATTACH names the event the program is written for: device::kernel_entry, device::kernel_exit,
device::global_load (the default), device::global_store, device::global_atomic, or user(N) for
N bytes of memory of the caller's. A pack's probe carries its attach point: --attach is then checked against it.

MAP declares the next entry of the program's map table (map[0], map[1], ...):
  NAME=KIND:KEY:VALUE:CAPACITY[:SM_SHARDS][@ADDRESS]
KIND is hash, array, percpu_hash, percpu_array or ringbuf; KEY and VALUE are sizes in bytes
(KEY 4 for arrays, 0 for ring buffers); CAPACITY is the entries (per shard), or the records of
a ring buffer; SM_SHARDS (default 0, or 132 for per-CPU kinds) gives per-SM shards; ADDRESS
(hexadecimal, default 0) is where the map lies in GPU memory, which the code uses as a
constant: with the default, the PTX is for reading, not for loading. A key or value the program
writes wider than the map declares is refused. A pack's probes carry their maps.")]
pub(crate) struct TranslateArgs {
    /// The program: FILE.s, bytecode, PACK (of one probe) or PACK:NAME
    pub(crate) program: String,
    /// The attach point the program is written for [default: device::global_load]
    #[arg(long, value_name = "ATTACH", value_parser = attach_point)]
    pub(crate) attach: Option<AttachPoint>,
    /// The kernel's name
    #[arg(long, value_name = "NAME", default_value = "probe")]
    pub(crate) kernel: String,
    /// The next map of the program's map table
    #[arg(long = "map", value_name = "MAP", value_parser = map_flag)]
    pub(crate) maps: Vec<MapFlag>,
}

/// `egpu inject`.
#[derive(Debug, Args)]
#[command(after_help = "\
Each --probe is ATTACH=PROGRAM, or a pack's probes by themselves: PACK:NAME, or PACK for every
device probe of the pack (ATTACH=PACK: those at ATTACH). ATTACH is device::kernel_entry,
device::kernel_exit, device::global_load, device::global_store or device::global_atomic. The
sites are listed on standard error, then `observed N of M global memory instructions` (by the
PTX ISA's table: loads, stores, atomics, asynchronous, bulk and tensor copies, tensor map
writes, texture, surface, multimem and wmma accesses), the ones not observed with why, and the
observed ones no probe attaches to. A cubin's register counts (or, with --arch, those of the fat
binary's cubin for it) bound the instrumented kernels (`.maxnreg`), so that each keeps its
blocks per SM. With --registers, each instrumented kernel's line says what ptxas gives it
before and after: `KERNEL: registers 30 -> 53, local memory 0 -> 0 bytes, blocks of 256
threads per SM 8 -> 4 (128: 16 -> 8, 512: 4 -> 2, 1024: 2 -> 1)` (registers, warps and blocks
per SM of the module's target; shared memory aside).

MAP declares the next entry of the map table of the assembly and bytecode programs:
NAME=KIND:KEY:VALUE:CAPACITY[:SM_SHARDS][@ADDRESS] (see `egpu help translate`).")]
pub(crate) struct InjectArgs {
    /// The PTX module: PTX text, a cubin that keeps its PTX, or a fat binary
    #[arg(value_name = "MODULE.ptx")]
    pub(crate) module: PathBuf,
    /// Of a fat binary, take the PTX a device of this architecture runs (sm_90)
    /// [default: the newest]
    #[arg(long = "arch", value_name = "sm_NN", value_parser = parse_arch)]
    pub(crate) arch: Option<u32>,
    /// A probe to inject
    #[arg(long = "probe", value_name = "[ATTACH=]PROGRAM", required = true)]
    pub(crate) probes: Vec<String>,
    /// Instrument this kernel (repeat for several) [default: every kernel]
    #[arg(long = "kernel", value_name = "NAME")]
    pub(crate) kernels: Vec<String>,
    /// The next map of the assembly and bytecode programs' map table
    #[arg(long = "map", value_name = "MAP", value_parser = map_flag)]
    pub(crate) maps: Vec<MapFlag>,
    /// Where to write the module [default: standard output]
    #[arg(short = 'o', long = "output", value_name = "OUT.ptx")]
    pub(crate) output: Option<PathBuf>,
    /// The device address of a table of tensor map boxes: tensor copies look their bytes up
    /// there [default: none, their size is 0]
    #[arg(long = "tensor-boxes", value_name = "ADDRESS", value_parser = parse_address)]
    pub(crate) tensor_boxes: Option<u64>,
    /// Compile the module before and after with ptxas (EGPU_PTXAS, or on PATH) and say what
    /// instrumenting costs each kernel: registers, local memory, blocks per SM
    #[arg(long = "registers")]
    pub(crate) registers: bool,
    /// In kernels that count by page in registers, run a probe whose page is not cached where
    /// the straight line of code ends, not at the access (the access's code has no branch)
    #[arg(long = "defer-misses")]
    pub(crate) defer_misses: bool,
}

/// An architecture, `sm_90` (or `90`): 90.
fn parse_arch(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("sm_").unwrap_or(text);
    digits.parse().map_err(|_| format!("not an architecture such as sm_90: `{text}`"))
}

/// An address, decimal or `0x` hexadecimal.
fn parse_address(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("not an address: {e}"))
}

/// `egpu run`.
#[derive(Debug, Args)]
#[command(after_help = "\
The library counts COMMAND's CUDA calls (launches by kernel, copies, allocations,
synchronisations, module loads) in shared memory, where `egpu maps` reads them. It is --library,
else $EGPU_PRELOAD, else libegpu_preload.so beside this program.

--summary: each process writes its counts to PATH.<pid> when it exits; PATH's folder must exist.
--probes: host probes run on the CUDA calls, device probes are injected into every module
loaded with PTX; their maps are in the summary and `egpu maps`.
--metrics: serves the counts of COMMAND and its children in Prometheus's format at
http://ADDRESS/metrics; ADDRESS is a loopback one, port 0 for any (the one taken is said on
standard error). The counts of processes that exited stay in what is served and pushed.
--otlp: pushes the same metrics to an OpenTelemetry collector (OTLP/HTTP, JSON; a URL like
http://127.0.0.1:4318) every --otlp-every seconds and when COMMAND ends (an egpu built with
the `otlp` feature), with a span per kernel launch made under a W3C trace context (egpu_tags.h,
egpu_tags.py, egpu::host::tags) to /v1/traces (OTLP/HTTP protobuf), timed by the host call, or
with --kernel-times by the kernel's CUDA events mapped to wall time.
--kernel-times: every kernel launch (with PTX or not: cuBLAS, ATen) is timed on the GPU by a pair
of CUDA events recorded on its stream around it (pooled, harvested without blocking; launches
in stream captures are not timed), into gpu.cuda.kernel.duration (seconds, a histogram per
process, per kernel with --kernel-names); the time spent in synchronisations goes into
gpu.cuda.synchronize.duration. Its cost: two event records per launch, and every CUDA call
taking the library's slower path ($EGPU_KERNEL_TIMES=1 does the same).
--gpu-time-report: with --kernel-times, when COMMAND ends, the timed launches' GPU time per tag
and per call site (sites captured with EGPU_SITES=N, named by each process at its exit) in FILE,
the GPU time by call stack as folded stacks in FILE.folded (outermost frame first, as inferno and
flamegraph.pl read them) and as a flame graph in FILE.svg. Each process keeps at most 1024 sites
and 1024 tags; the rest goes to one `other` entry.

Exits as COMMAND does: 127 when it is not found, 126 when it cannot be run, 128+N when signal N
ended it; egpu's own usage errors exit with 2 and its failures with 1, before COMMAND starts.")]
pub(crate) struct RunArgs {
    /// Write each process's counts to PATH.<pid> when it exits
    #[arg(long, value_name = "PATH")]
    pub(crate) summary: Option<PathBuf>,
    /// The preloaded library
    #[arg(long, value_name = "PATH")]
    pub(crate) library: Option<PathBuf>,
    /// Also run a probe pack's probes (PACK, or PACK:NAME for one)
    #[arg(long, value_name = "PACK")]
    pub(crate) probes: Option<String>,
    /// Serve the counts as Prometheus metrics at http://ADDRESS/metrics
    #[arg(long, value_name = "ADDRESS", value_parser = loopback)]
    pub(crate) metrics: Option<SocketAddr>,
    /// Label the metrics with kernel names
    #[arg(long, requires = "metrics")]
    pub(crate) kernel_names: bool,
    /// Push the metrics to an OpenTelemetry collector at URL
    #[arg(long, value_name = "URL")]
    pub(crate) otlp: Option<String>,
    /// Seconds between OTLP pushes
    #[arg(long, value_name = "SECONDS", value_parser = seconds, default_value = "10",
          requires = "otlp")]
    pub(crate) otlp_every: Duration,
    /// How OTLP pushes are encoded
    #[arg(
        long,
        value_name = "PROTOCOL",
        value_enum,
        default_value = "http/json",
        requires = "otlp"
    )]
    pub(crate) otlp_protocol: OtlpProtocol,
    /// Keep serving the last metrics this long after the command ends (30s, 5m, 1h30m)
    #[arg(long, value_name = "DURATION", value_parser = linger, requires = "metrics")]
    pub(crate) linger: Option<Duration>,
    /// Time every kernel launch on the GPU with CUDA events around it (costs two event
    /// records per launch)
    #[arg(long)]
    pub(crate) kernel_times: bool,
    /// Write the GPU time per tag and per call site to FILE, its folded stacks to FILE.folded
    /// and its flame graph to FILE.svg when the command ends
    #[arg(long, value_name = "FILE", requires = "kernel_times")]
    pub(crate) gpu_time_report: Option<PathBuf>,
    /// The command and its arguments (after `--` when the command starts with `-`)
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
    /// More of the command's environment (`egpu mem run`'s).
    #[arg(skip)]
    pub(crate) env: Vec<(OsString, OsString)>,
}

/// `egpu mem`.
#[derive(Debug, Subcommand)]
pub(crate) enum MemCommand {
    /// Run a command with the sets' probes in its kernels, then print a table per process.
    Run(MemRunArgs),
    /// Print the tables of recordings (`.egpumem` files, or folders of them).
    Report(MemReportArgs),
    /// Draw recordings: a heatmap, bandwidth over time, launch durations, requests per SM, a page
    Render(MemRenderArgs),
    /// How LRU and LFU caches of part of the working set would serve recordings' sampled pages
    WhatIf(MemWhatIfArgs),
}

/// `egpu mem run`.
#[derive(Debug, Args)]
#[command(after_help = "\
The sets are device probes injected into every kernel COMMAND loads with PTX:
  counts  accesses and bytes per kernel and class (load, store, atomic, async and tensor copy)
  timing  each launch's GPU time, from the device clock (%globaltimer) at block 0's start and
          at each block's end
  pattern per kernel and access site, the warp-level requests, the 32-byte sectors they
          touched and the fewest they could have (coalescing)
  pages   per kernel, accesses per page of --page-size, and the addresses its atomics meet at
  timeline one warp in --sample N, drawn again at each turn of a loop (--sample-by warps: for
          life; blocks: the warps of one block in N; lines: one line in N of each warp's): each
          request's device time, SM, address, size and lanes; bandwidth per kernel over
          windows of --window, and up to --max-records records kept
  allocs  per kernel and device allocation, the accesses and bytes that fell in it (a table of
          the live allocations, kept at each allocation and free, searched at each access)

Each process that launched kernels writes its recording, DIR/<pid>.egpumem (JSON lines: a
header naming the device, the driver and egpu, a line per kernel, per launch timed and per
site, per window and per record kept), and the table is printed from it. --kernel REGEX
instruments only the kernels whose mangled name (`_Z5saxpyfPKfPfx`) it matches (anywhere in
the name; anchor it with ^ and $), through EGPU_KERNELS. Kernels without PTX (cuBLAS, ATen's)
are listed with their launches, as not instrumentable; with --kernel-times every launch is also
timed by a pair of CUDA events around it (two event records per launch), whose GPU time the
table shows, marked `(events)`, where the `timing` set did not time the kernel. Exits as
COMMAND does.")]
pub(crate) struct MemRunArgs {
    /// The sets to run, separated by commas
    #[arg(long, value_name = "SETS", value_delimiter = ',', default_value = "counts,timing")]
    pub(crate) sets: Vec<egpu::host::mem::Set>,
    /// The pages the `pages` set counts accesses by: 4k, 64k or 2m
    #[arg(long, value_name = "SIZE", default_value = "2m")]
    pub(crate) page_size: egpu::host::mem::PageSize,
    /// The `timeline` set records one warp in N (a power of two, 1 to 1024)
    #[arg(long, value_name = "N", default_value = "32")]
    pub(crate) sample: egpu::host::mem::Sampling,
    /// What `--sample` picks one in N of: turns (warps drawn again at each turn of a loop:
    /// every warp records in about one turn in N), warps (a sampled warp records all its
    /// requests), blocks (each warp of a sampled block does) or lines (every warp records the
    /// requests to about one in N of its 128-byte lines)
    #[arg(long, value_name = "WHAT", default_value = "turns")]
    pub(crate) sample_by: egpu::host::mem::SampleBy,
    /// The `timeline` set's windows: 100us, 1ms, … [default: a 50th of each kernel's longest
    /// launch, at least 1us]
    #[arg(long, value_name = "DURATION", value_parser = window)]
    pub(crate) window: Option<Duration>,
    /// Raw records of the `timeline` set a recording keeps (a uniform sample of them all)
    #[arg(long, value_name = "N", default_value_t = egpu::host::mem::windows::KEEP)]
    pub(crate) max_records: usize,
    /// Instrument only the kernels whose mangled name this regular expression matches
    #[arg(long, value_name = "REGEX", value_parser = kernel_regex)]
    pub(crate) kernel: Option<String>,
    /// Keep the recordings, their pictures and index.html (`egpu mem render`) in DIR (created
    /// if need be) [default: a temporary folder, removed]
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Also time every kernel launch with CUDA events around it, those without PTX included
    /// (costs two event records per launch)
    #[arg(long)]
    pub(crate) kernel_times: bool,
    /// The preloaded library
    #[arg(long, value_name = "PATH")]
    pub(crate) library: Option<PathBuf>,
    /// The command and its arguments (after `--` when the command starts with `-`)
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

/// `egpu cxl`.
#[derive(Debug, Args)]
#[command(after_help = "\
Runs COMMAND three times under the preloaded library, every kernel launch timed by CUDA events:
once as it is (the baseline; --no-baseline leaves it out), then with the far tier's probes at
every global load, store and atomic of the kernels with PTX, where each warp-level request to far
memory waits --far-latency (Δ: the far tier's latency less local memory's, at most 1048575ns;
the instrumented kernels' registers bounded to keep their blocks per SM, EGPU_MAXNREG=1 unless
the environment sets it). Which memory is far is --far: all, none, size:BYTES (device
allocations of at least that many bytes; K, M, G suffixes), nth:N[,N..] (the Nth device
allocations, from 1), pages:FRACTION (that fraction of pages, by hash), ranges:START-END[,..]
or marked (the ranges the program marks by calling the preloaded library's
egpu_cxl_mark(address, bytes), found with dlsym). egpu reads each process's allocations and
marks as it makes them and writes its tier into its maps, which the GPU sees at the next merge
(EGPU_MERGE_MS, 100 ms): kernels launched before then run as if nothing were far. With
--bandwidth, far requests also wait for their SM's link (a token bucket per SM). Then, untimed,
with probes that count each kernel's accesses and those to far memory (--no-count leaves this
run out). Prints per kernel the launches, the mean GPU time of the baseline and emulated runs,
the slowdown and the share of its accesses that went to far memory. Exits as the emulated
COMMAND does.")]
pub(crate) struct CxlArgs {
    /// Which memory is far
    #[arg(long, value_name = "POLICY", default_value = "all")]
    pub(crate) far: egpu::host::cxl::Policy,
    /// What each request to far memory waits: 100ns, 250ns, 1us (at most 1048575ns, about 1ms)
    #[arg(long, value_name = "DURATION", default_value = "250ns", value_parser = humantime::parse_duration)]
    pub(crate) far_latency: Duration,
    /// Cap far requests at this many bytes per second per SM (2G, 500M, 2GB/s: K, M, G, T are
    /// powers of 1024): a token bucket per SM, whose requests wait for its link on top of the
    /// far latency. A link of B shared by S SMs is B/S per SM
    #[arg(long, value_name = "RATE", value_parser = bandwidth)]
    pub(crate) bandwidth: Option<u64>,
    /// Find far memory in a bitmap of pages of this many bytes (4K to 1G, a power of two)
    /// instead of a table of ranges
    #[arg(long, value_name = "BYTES")]
    pub(crate) bitmap_pages: Option<String>,
    /// Leave the baseline run out (the table then has the emulated times only)
    #[arg(long)]
    pub(crate) no_baseline: bool,
    /// Leave the count run out (a third run, untimed, that counts each kernel's accesses and
    /// those to far memory; the table then has no share of far accesses)
    #[arg(long)]
    pub(crate) no_count: bool,
    /// The preloaded library
    #[arg(long, value_name = "PATH")]
    pub(crate) library: Option<PathBuf>,
    /// The command and its arguments (after `--` when the command starts with `-`)
    #[arg(value_name = "COMMAND", required = true, num_args = 1.., trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

/// `egpu mem report`.
#[derive(Debug, Args)]
pub(crate) struct MemReportArgs {
    /// Recordings, or folders whose `.egpumem` files are read
    #[arg(value_name = "PATH", required = true)]
    pub(crate) paths: Vec<PathBuf>,
}

/// `egpu mem render`.
#[derive(Debug, Args)]
#[command(after_help = "\
Writes into DIR report.txt (the table of `egpu mem report`), heatmap, bandwidth, durations, sms
and allocations as .png and .svg, and index.html, which shows the table and the pictures. The
heatmap shows the `timeline` set's samples by address range (touched ranges only) and device
time (long idle stretches between launches cut, grey), the launches they came from marked; the
bandwidth plot the `timeline` set's windows per kernel against the device's peak; the histogram the `timing`
set's launch durations per kernel; the bars the `timeline` set's samples per SM, kernels
stacked; the allocations the `allocs` set's bytes per allocation and kernel, cold allocations as
empty rows. A picture without data says which set to run. Several recordings are rendered into a
sub-folder each, named after the file, with an index.html linking them. With --kernel, the table
and the pictures keep the kernels it finds only (a kernel's launches apart, say). Progress goes
to stderr, a line per recording and per picture; stdout gets the index.html paths. Needs no GPU.")]
pub(crate) struct MemRenderArgs {
    /// Recordings, or folders whose `.egpumem` files are read
    #[arg(value_name = "RECORDING", required = true)]
    pub(crate) paths: Vec<PathBuf>,
    /// The folder to write into (created if need be)
    #[arg(long, value_name = "DIR", required = true)]
    pub(crate) out: PathBuf,
    /// Draw only the kernels whose mangled name this regular expression matches
    #[arg(long, value_name = "REGEX", value_parser = kernel_regex)]
    pub(crate) kernel: Option<String>,
}

/// `egpu mem what-if`.
#[derive(Debug, Args)]
#[command(after_help = "\
Reads the `timeline` set's samples of each recording (`egpu mem run --sets timeline`; raise
--max-records there to keep every record) as a sequence of page accesses in device-time order,
a store or an atomic writing its page, and says for LRU and LFU caches of 25%, 50% and 75% of
the pages it touched the hit rate, the misses (first touches apart), and the bytes they would
move in and write back. The samples are one warp in N's requests: the what-if is the sampled
warps', which the line above each table says. Needs no GPU.")]
pub(crate) struct MemWhatIfArgs {
    /// Recordings, or folders whose `.egpumem` files are read
    #[arg(value_name = "PATH", required = true)]
    pub(crate) paths: Vec<PathBuf>,
    /// The pages the cache holds: 4k, 64k or 2m
    #[arg(long, value_name = "SIZE", default_value = "2m")]
    pub(crate) page_size: egpu::host::mem::PageSize,
    /// Only the kernels whose mangled name this regular expression matches
    #[arg(long, value_name = "REGEX", value_parser = kernel_regex)]
    pub(crate) kernel: Option<String>,
}

/// `egpu maps`.
#[derive(Debug, Args)]
#[command(after_help = "\
Without PID: the processes whose counts are in shared memory, a line each (the objects of
processes that died are removed). With PID: its report, then its probes' maps, an entry a line
(`map NAME KEY VALUE`).")]
pub(crate) struct MapsArgs {
    /// Print what this process counted so far, and its probes' maps
    #[arg(value_name = "PID", value_parser = process_id)]
    pub(crate) pid: Option<u32>,
    /// Print them again every SECONDS, until the process exits
    #[arg(long, value_name = "SECONDS", value_parser = seconds, requires = "pid")]
    pub(crate) watch: Option<Duration>,
    /// Print JSON (with --watch, a document per line)
    #[arg(long)]
    pub(crate) json: bool,
}

/// `egpu list`.
#[derive(Debug, Args)]
#[command(after_help = "\
Each attach point is listed as #[egpu::probe] spells it (host::launch is the call's entry,
host::launch::exit its exit), with its context type, where its probes run and when; each helper
with its number, its arguments (r1, r2, ...) and where it runs (the CPU VM, the GPU or both).

PATTERN keeps what matches it: a glob over the whole name when it has * or ? ('host::*',
'bpf_map_*'), else a substring (launch). Attach points match by either spelling or their context
type's name (KernelCtx), helpers by name.")]
pub(crate) struct ListArgs {
    /// Only what matches this glob or substring
    #[arg(value_name = "PATTERN")]
    pub(crate) pattern: Option<String>,
    /// Also print each context's fields (offset, size, type, name, what it holds), and each
    /// helper's arguments and what it does on the CPU and on the GPU
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Print JSON (every context's fields and every helper's details)
    #[arg(long)]
    pub(crate) json: bool,
}

/// A `--map NAME=KIND:KEY:VALUE:CAPACITY[:SM_SHARDS][@ADDRESS]` flag: the map's definition (a
/// `MapDef` in its text form) and where the GPU finds it.
#[derive(Clone, Debug)]
pub(crate) struct MapFlag {
    /// The definition, an entry of the program's map table.
    pub(crate) def: MapDef,
    /// Its layout and address on the GPU.
    pub(crate) binding: DeviceMap,
}

/// Parses a `--map` flag's value.
pub(crate) fn map_flag(flag: &str) -> Result<MapFlag, String> {
    // The placement comes off first: `@ADDRESS`, then SM_SHARDS, a fifth field after `NAME=`.
    let (def, addr) = match flag.split_once('@') {
        Some((def, addr)) => {
            let digits = addr.trim_start_matches("0x");
            let addr = u64::from_str_radix(digits, 16)
                .map_err(|_| "the address is a hexadecimal number".to_string())?;
            (def, addr)
        }
        None => (flag, 0),
    };
    let four_fields =
        |def: &str| def.split_once('=').is_some_and(|(_, f)| f.split(':').count() == 4);
    let (def, sm_shards) = match def.rsplit_once(':') {
        Some((def, shards)) if four_fields(def) => {
            let shards = shards
                .parse::<u32>()
                .map_err(|_| format!("SM_SHARDS `{shards}` is not a number"))?;
            (def, Some(shards))
        }
        _ => (def, None),
    };
    let def: MapDef = def.parse().map_err(|e: ParseMapDefError| e.to_string())?;
    let kind = def.kind;
    let per_cpu = matches!(kind, MapKind::PerCpuHash | MapKind::PerCpuArray);
    let sm_shards = sm_shards.unwrap_or(if per_cpu { 132 } else { 0 });
    // Per-CPU kinds: a host shard and the SM shards. Others: one host shard, or SM shards only
    // (a ring per SM).
    let cpu_shards = if per_cpu || sm_shards == 0 { 1 } else { 0 };
    let geometry =
        Geometry::new(kind, def.key_size, def.value_size, def.capacity, cpu_shards, sm_shards)
            .map_err(|e| e.to_string())?;
    Ok(MapFlag {
        def,
        binding: DeviceMap { addr, geometry, live: false, spread: 0, drained: false },
    })
}

/// Parses an attach point: what `AttachPoint`'s `FromStr` reads (the macro's spellings, such as
/// `host::launch` and `device::global_load`, and `user(N)`).
pub(crate) fn attach_point(s: &str) -> Result<AttachPoint, String> {
    if s.trim() == "user" {
        return Err("`user` takes the size of its context here: user(N), N bytes".into());
    }
    s.parse().map_err(|e: egpu::ebpf::ParseAttachError| e.to_string())
}

/// A positive, finite number of seconds.
pub(crate) fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| "a number of seconds, more than 0".into())
}

/// `--otlp-protocol`: OTLP/HTTP's encodings, spelt as `OTEL_EXPORTER_OTLP_PROTOCOL` spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OtlpProtocol {
    /// JSON (`application/json`)
    #[value(name = "http/json")]
    Json,
    /// Protocol buffers (`application/x-protobuf`)
    #[value(name = "http/protobuf")]
    Protobuf,
}

/// `--linger`'s duration: `30s`, `5m`, `1h30m`, `500ms` (humantime's units), or a number of
/// seconds; at most a year.
pub(crate) fn linger(s: &str) -> Result<Duration, String> {
    const MOST: Duration = Duration::from_secs(366 * 24 * 3600);
    let d = match seconds(s) {
        Ok(d) => d,
        Err(_) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("a duration such as 30s, 5m or 1h30m ({e})"))?,
    };
    if d > MOST {
        return Err("at most a year".into());
    }
    Ok(d)
}

/// `--window`'s duration: `100us`, `1ms` (humantime's units), from 128 ns to a minute.
pub(crate) fn window(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("a duration such as 100us or 1ms ({e})"))?;
    if d < Duration::from_nanos(128) || d > Duration::from_secs(60) {
        return Err("from 128ns to 60s".into());
    }
    Ok(d)
}

/// `--kernel`'s regular expression, checked here (the preloaded library matches it).
fn kernel_regex(s: &str) -> Result<String, String> {
    regex_lite::Regex::new(s).map(|_| s.to_owned()).map_err(|e| e.to_string())
}

/// A process id.
fn process_id(s: &str) -> Result<u32, String> {
    s.parse::<u32>().ok().filter(|&pid| pid > 0).ok_or_else(|| "not a process id".into())
}

/// `--metrics`'s address, which must be a loopback one.
pub(crate) fn loopback(address: &str) -> Result<SocketAddr, String> {
    let parsed: SocketAddr =
        address.parse().map_err(|_| "an address and port, such as 127.0.0.1:9400".to_string())?;
    if !parsed.ip().is_loopback() {
        return Err(
            "a loopback address (127.0.0.1, ::1): the counts are not for other machines".into()
        );
    }
    Ok(parsed)
}

/// `--bandwidth`: bytes per second, as policies write numbers, with an optional `B/s` or `/s`.
fn bandwidth(text: &str) -> Result<u64, String> {
    let number = text.trim().trim_end_matches("/s").trim_end_matches('B');
    match egpu::host::cxl::number(number) {
        Some(rate) if rate > 0 => Ok(rate),
        _ => Err(format!("`{text}` is not a rate: bytes per second, like 2G, 500M or 2GB/s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn values_parse_or_say_why() {
        assert!(seconds("0").is_err() && seconds("inf").is_err() && seconds("x").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(process_id("42"), Ok(42));
        assert!(process_id("0").is_err() && process_id("-1").is_err());
        assert!(loopback("[::1]:0").is_ok());
        assert!(loopback("10.0.0.1:80").unwrap_err().contains("loopback"));
        let m = map_flag("counts=percpu_array:4:8:16:4@0x1000").expect("a map");
        assert_eq!((m.binding.addr, m.binding.geometry.sm_shards), (0x1000, 4));
        assert!(attach_point("user").unwrap_err().contains("user(N)"));
    }
}
