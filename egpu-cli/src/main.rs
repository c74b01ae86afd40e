//! The `egpu` command line.
//!
//! ```text
//! egpu translate PROGRAM [--attach ATTACH] [--kernel NAME] [--map MAP]...
//! egpu inject MODULE.ptx --probe ATTACH=PROGRAM... [--kernel NAME]... [--map MAP]... [-o OUT.ptx]
//! egpu run [--summary PATH] [--library PATH] [--probes PACK] [--metrics ADDRESS [--kernel-names]]
//!          [--otlp URL [--otlp-every SECONDS]] -- COMMAND [ARGS]...
//! egpu maps [PID] [--watch SECONDS]
//! ```
//!
//! A PROGRAM is an eBPF program file: assembly text (bpf_conformance syntax, as `egpu::ebpf::asm`
//! reads it), or bytecode (little-endian 8-byte instructions, as `Program::to_bytes` writes them
//! and as a Rust probe's `program().to_bytes()` gives). Every program is verified first, with the
//! maps the `--map` flags declare as its map table (`map[0]`, `map[1]`, … in their order).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use egpu::ebpf::verifier::{Verified, verify};
use egpu::ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, ParseMapDefError, Program, assemble};
use egpu_device::inject::{DeviceProbe, Kernels, inject};
use egpu_device::translate::{DeviceMap, kernel_module_with};
use egpu_maps::layout::Geometry;

const USAGE: &str = "\
usage:
  egpu translate PROGRAM [--attach ATTACH] [--kernel NAME] [--map MAP]...
      Prints a PTX module whose kernel NAME (default `probe`) runs the program once per thread.
      ATTACH defaults to device::global_load; user(N) gives the program N bytes of memory.
  egpu inject MODULE.ptx --probe ATTACH=PROGRAM... [--kernel NAME]... [--map MAP]... [-o OUT.ptx]
      Writes MODULE with every probe injected at its attach point (device::kernel_entry,
      device::kernel_exit, device::global_load, device::global_store), in every kernel or in the
      kernels named, to OUT (default: standard output), and lists the sites on standard error.

  egpu run [--summary PATH] [--library PATH] [--probes PACK] [--metrics ADDRESS [--kernel-names]]
           [--otlp URL [--otlp-every SECONDS]] -- COMMAND...
      Runs COMMAND under egpu's preloaded library, which counts its CUDA calls (launches by
      kernel, copies, allocations, synchronisations, module loads) in shared memory; the library
      is PATH, else $EGPU_PRELOAD, else libegpu_preload.so beside this program. With --summary,
      each process writes its counts to PATH.<pid> when it exits. With --metrics, serves the
      counts of COMMAND and its children in Prometheus's format at http://ADDRESS/metrics (a
      loopback address, port 0 for any; the address taken is said on standard error), with a
      kernel-name label when --kernel-names. With --probes, the library also runs the probes of
      PACK (a probe pack, or a shared library made with egpu::export_probes!): host probes on the
      CUDA calls, device probes injected into every module loaded with PTX; their maps are in
      the summary and `egpu maps`. With --otlp (an egpu built with the `otlp` feature), pushes
      the same metrics to an OpenTelemetry collector (OTLP/HTTP, JSON; URL like
      http://127.0.0.1:4318) every SECONDS (default 10) and when COMMAND ends; the counts of
      processes that exited meanwhile stay in what is served and pushed. Exits as COMMAND does.
  egpu maps [PID] [--watch SECONDS]
      Without PID: the processes whose counts are in shared memory (and removes those of
      processes that died). With PID: what that process counted so far; --watch repeats.

PROGRAM is eBPF assembly text or bytecode (little-endian 8-byte instructions).
MAP declares the next entry of every program's map table (map[0], map[1], ...):
  NAME=KIND:KEY:VALUE:CAPACITY[:SM_SHARDS][@ADDRESS]
  KIND is hash, array, percpu_hash, percpu_array or ringbuf; KEY and VALUE are sizes in bytes
  (KEY 4 for arrays, 0 for ring buffers); CAPACITY is the entries (per shard), or the records
  of a ring buffer; SM_SHARDS (default 0, or 132 for per-CPU kinds) gives per-SM shards;
  ADDRESS (hexadecimal, default 0) is where the map lies in GPU memory, which the code uses as
  a constant: with the default, the PTX is for reading, not for loading.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("translate") => translate(&args[1..]),
        Some("inject") => inject_cmd(&args[1..]),
        Some("run") => return run_cmd(&args[1..]),
        Some("maps") => maps_cmd(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(Error::Usage(
            "expected a subcommand: `translate`, `inject`, `run` or `maps`".into(),
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Usage(why)) => {
            eprintln!("egpu: {why}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Error::Failed(why)) => {
            eprintln!("egpu: {why}");
            ExitCode::FAILURE
        }
    }
}

enum Error {
    Usage(String),
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Failed(e.to_string())
}

/// Positional arguments, and `--flag value` pairs in order.
type Parsed = (Vec<String>, Vec<(String, String)>);

/// Splits arguments into positional ones and `--flag value` pairs.
fn parse(args: &[String], flags: &[&str]) -> Result<Parsed, Error> {
    let (mut positional, mut options) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.starts_with('-') && a.len() > 1 {
            if !flags.contains(&a.as_str()) {
                return Err(Error::Usage(format!("unknown option `{a}`")));
            }
            let value = it.next().ok_or_else(|| Error::Usage(format!("`{a}` needs a value")))?;
            options.push((a.clone(), value.clone()));
        } else {
            positional.push(a.clone());
        }
    }
    Ok((positional, options))
}

/// Reads and verifies a program file for `attach`, with `maps` as its map table.
fn load(path: &Path, attach: AttachPoint, maps: &[(MapDef, DeviceMap)]) -> Result<Verified, Error> {
    let bytes =
        std::fs::read(path).map_err(|e| failed(format!("reading {}: {e}", path.display())))?;
    let defs: Vec<MapDef> = maps.iter().map(|(d, _)| d.clone()).collect();
    let program = match std::str::from_utf8(&bytes) {
        Ok(text) if !text.contains('\0') => {
            let slots = assemble(text).map_err(|e| failed(format!("{}: {e}", path.display())))?;
            Program::new(slots, defs, attach)
        }
        _ => Program::from_bytes(&bytes, defs, attach),
    }
    .map_err(|e| failed(format!("{}: {e}", path.display())))?;
    verify(&program)
        .map_err(|e| failed(format!("{}: the verifier refused it: {e}", path.display())))
}

/// A `--map NAME=KIND:KEY:VALUE:CAPACITY[:SM_SHARDS][@ADDRESS]` flag: the map's definition (a
/// `MapDef` in its text form) and where the GPU finds it.
fn map_flag(flag: &str) -> Result<(MapDef, DeviceMap), Error> {
    let bad = |why: &str| Error::Usage(format!("`--map {flag}`: {why}"));
    // The placement comes off first: `@ADDRESS`, then SM_SHARDS, a fifth field after `NAME=`.
    let (def, addr) = match flag.split_once('@') {
        Some((def, addr)) => {
            let digits = addr.trim_start_matches("0x");
            let addr = u64::from_str_radix(digits, 16)
                .map_err(|_| bad("the address is a hexadecimal number"))?;
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
                .map_err(|_| bad(&format!("SM_SHARDS `{shards}` is not a number")))?;
            (def, Some(shards))
        }
        _ => (def, None),
    };
    let def: MapDef = def.parse().map_err(|e: ParseMapDefError| bad(&e.to_string()))?;
    let kind = def.kind;
    let per_cpu = matches!(kind, MapKind::PerCpuHash | MapKind::PerCpuArray);
    let sm_shards = sm_shards.unwrap_or(if per_cpu { 132 } else { 0 });
    // Per-CPU kinds: a host shard and the SM shards. Others: one host shard, or SM shards only
    // (a ring per SM).
    let cpu_shards = if per_cpu || sm_shards == 0 { 1 } else { 0 };
    let geometry =
        Geometry::new(kind, def.key_size, def.value_size, def.capacity, cpu_shards, sm_shards)
            .map_err(|e| bad(&e.to_string()))?;
    Ok((def, DeviceMap { addr, geometry, live: false, spread: 0 }))
}

fn attach_point(s: &str) -> Result<AttachPoint, Error> {
    s.parse().map_err(|e| Error::Usage(format!("{e}")))
}

fn translate(args: &[String]) -> Result<(), Error> {
    let (files, options) = parse(args, &["--attach", "--kernel", "--map"])?;
    let [file] = files.as_slice() else {
        return Err(Error::Usage("`translate` takes one program file".into()));
    };
    let mut attach = AttachPoint::Device(DeviceEvent::GlobalLoad);
    let mut kernel = "probe".to_string();
    let mut maps = Vec::new();
    for (flag, value) in options {
        match flag.as_str() {
            "--attach" => attach = attach_point(&value)?,
            "--map" => maps.push(map_flag(&value)?),
            _ => kernel = value,
        }
    }
    if matches!(attach, AttachPoint::Host(..)) {
        return Err(Error::Usage(format!("{attach} runs on the host, not in a kernel")));
    }
    let verified = load(Path::new(file), attach, &maps)?;
    let bindings: Vec<DeviceMap> = maps.iter().map(|(_, b)| *b).collect();
    print!("{}", kernel_module_with(&verified, &kernel, &bindings).map_err(failed)?);
    Ok(())
}

fn inject_cmd(args: &[String]) -> Result<(), Error> {
    let (files, options) = parse(args, &["--probe", "--kernel", "--map", "-o"])?;
    let [module] = files.as_slice() else {
        return Err(Error::Usage("`inject` takes one PTX file".into()));
    };
    let (mut probe_files, mut kernels, mut out) = (Vec::new(), Vec::new(), None::<PathBuf>);
    let mut maps = Vec::new();
    for (flag, value) in options {
        match flag.as_str() {
            "--probe" => {
                let (attach, file) = value.split_once('=').ok_or_else(|| {
                    Error::Usage(format!("`--probe {value}`: expected ATTACH=PROGRAM"))
                })?;
                let attach = attach_point(attach)?;
                if !attach.is_device() {
                    return Err(Error::Usage(format!("{attach} is not a device attach point")));
                }
                probe_files.push((attach, PathBuf::from(file)));
            }
            "--map" => maps.push(map_flag(&value)?),
            "--kernel" => kernels.push(value),
            _ => out = Some(PathBuf::from(value)),
        }
    }
    let programs = probe_files
        .iter()
        .map(|(attach, file)| load(file, *attach, &maps))
        .collect::<Result<Vec<_>, _>>()?;
    let bindings: Vec<DeviceMap> = maps.iter().map(|(_, b)| *b).collect();
    if programs.is_empty() {
        return Err(Error::Usage("`inject` needs at least one `--probe ATTACH=PROGRAM`".into()));
    }
    let ptx =
        std::fs::read_to_string(module).map_err(|e| failed(format!("reading {module}: {e}")))?;
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    let selection = if names.is_empty() { Kernels::All } else { Kernels::Named(&names) };
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: p, kernels: selection, maps: &bindings })
        .collect();
    let injected = inject(&ptx, &probes).map_err(|e| failed(format!("{module}: {e}")))?;
    for s in &injected.sites {
        let size = if s.size > 0 { format!(", {} bytes", s.size) } else { String::new() };
        let event = AttachPoint::Device(s.event);
        eprintln!("{module}:{}: {event} in {}{size}", s.line, s.function);
    }
    for s in &injected.unobserved {
        let event = AttachPoint::Device(s.event);
        eprintln!(
            "{module}:{}: {event} in {} not observed: its address is not understood",
            s.line, s.function
        );
    }
    eprintln!("{} sites", injected.sites.len());
    match out {
        Some(path) => std::fs::write(&path, &injected.ptx)
            .map_err(|e| failed(format!("writing {}: {e}", path.display())))?,
        None => print!("{}", injected.ptx),
    }
    Ok(())
}

/// `egpu run`: the command's exit code, or the usage or failure code.
fn run_cmd(args: &[String]) -> ExitCode {
    match run_command(args) {
        Ok(code) => code,
        Err(Error::Usage(why)) => {
            eprintln!("egpu: {why}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Error::Failed(why)) => {
            eprintln!("egpu: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run_command(args: &[String]) -> Result<ExitCode, Error> {
    let split = args.iter().position(|a| a == "--");
    let (flags, command) = match split {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &[][..]),
    };
    let kernel_names = flags.iter().any(|f| f == "--kernel-names");
    let flags: Vec<String> = flags.iter().filter(|f| *f != "--kernel-names").cloned().collect();
    let (positional, options) = parse(
        &flags,
        &["--summary", "--library", "--metrics", "--probes", "--otlp", "--otlp-every"],
    )?;
    if !positional.is_empty() || command.is_empty() {
        return Err(Error::Usage("`run` takes `-- COMMAND [ARGS]...`".into()));
    }
    let mut library = std::env::var_os("EGPU_PRELOAD").map(PathBuf::from);
    let mut summary = None;
    let mut metrics = None;
    let mut probes = None;
    let mut otlp = None;
    let mut otlp_every = std::time::Duration::from_secs(10);
    for (flag, value) in options {
        match flag.as_str() {
            "--otlp" => otlp = Some(value),
            "--otlp-every" => {
                otlp_every = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && s.is_finite())
                    .map(std::time::Duration::from_secs_f64)
                    .ok_or_else(|| Error::Usage(format!("`--otlp-every {value}`: seconds")))?;
            }
            "--library" => library = Some(PathBuf::from(value)),
            "--metrics" => metrics = Some(value),
            "--probes" => probes = Some(PathBuf::from(value)),
            _ => summary = Some(value),
        }
    }
    if kernel_names && metrics.is_none() {
        return Err(Error::Usage("`--kernel-names` goes with `--metrics`".into()));
    }
    let metrics = metrics.map(|address| loopback(&address)).transpose()?;
    let otlp = otlp.map(|url| otlp_endpoint(&url)).transpose()?;
    let library = match library {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| failed(format!("finding this program: {e}")))?
            .with_file_name("libegpu_preload.so"),
    };
    if !library.is_file() {
        return Err(failed(format!(
            "the preloaded library {} does not exist: build it with `cargo build --release -p \
             egpu-preload` and put it beside egpu, or name it with --library or EGPU_PRELOAD",
            library.display()
        )));
    }
    let library =
        library.canonicalize().map_err(|e| failed(format!("{}: {e}", library.display())))?;
    // Ahead of whatever the environment preloads already.
    let mut preload = library.into_os_string();
    if let Some(more) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(more);
    }
    let mut child = std::process::Command::new(&command[0]);
    child.args(&command[1..]).env("LD_PRELOAD", preload);
    if let Some(path) = probes {
        // Read here first, so that a pack that cannot be read stops before the command starts.
        let pack = egpu::pack::Pack::load(&path).map_err(|e| failed(e.to_string()))?;
        let path = path.canonicalize().map_err(|e| failed(format!("{}: {e}", path.display())))?;
        eprintln!("egpu: {} probes from {}", pack.probes().len(), path.display());
        child.env("EGPU_PROBES", path);
    }
    if let Some(path) = summary {
        child.env("EGPU_SUMMARY", path);
    }
    let options = egpu::host::builtin::MetricsOptions::default().with_kernel_names(kernel_names);
    let descendants = Descendants::new();
    if metrics.is_some() || otlp.is_some() {
        descendants.watch();
    }
    // Listening before the command starts, so that its first scrape finds the server.
    if let Some(address) = metrics {
        serve_metrics(address, options, descendants.clone())?;
    }
    let pusher =
        otlp.map(|endpoint| OtlpPusher::start(endpoint, otlp_every, options, &descendants));
    let status = child.status().map_err(|e| failed(format!("running {}: {e}", command[0])))?;
    if let Some(pusher) = pusher {
        // The last counts, those of processes that have exited included.
        pusher.finish(&descendants);
    }
    use std::os::unix::process::ExitStatusExt as _;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        _ => 1,
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// `egpu maps`: the processes with counts in shared memory, or one process's counts.
fn maps_cmd(args: &[String]) -> Result<(), Error> {
    use egpu::host::builtin;
    let (positional, options) = parse(args, &["--watch"])?;
    let mut watch = None;
    for (_, value) in options {
        let seconds: f64 = value
            .parse()
            .ok()
            .filter(|s: &f64| *s > 0.0 && s.is_finite())
            .ok_or_else(|| Error::Usage(format!("`--watch {value}`: a number of seconds")))?;
        watch = Some(std::time::Duration::from_secs_f64(seconds));
    }
    match positional.as_slice() {
        [] => {
            let removed = builtin::clean_dead();
            if removed > 0 {
                eprintln!("removed the objects of {removed} processes that no longer exist");
            }
            for pid in builtin::processes() {
                let line = builtin::Builtin::open(pid).map_or_else(
                    |e| format!("{pid}: {e}"),
                    |b| {
                        let report = b.report(None);
                        let launches = report.lines().nth(1).unwrap_or_default().to_owned();
                        format!("{pid}: {launches}")
                    },
                );
                println!("{line}");
            }
            Ok(())
        }
        [pid] => {
            let pid: u32 =
                pid.parse().map_err(|_| Error::Usage(format!("`{pid}` is not a process id")))?;
            let maps = builtin::Builtin::open(pid).map_err(|e| {
                failed(format!("process {pid} has no egpu maps in shared memory ({e})"))
            })?;
            loop {
                print!("{}", maps.report(None));
                print!("{}", maps.render_maps(&maps.user_maps()));
                let Some(every) = watch else { return Ok(()) };
                if !builtin::alive(pid) {
                    return Ok(());
                }
                std::thread::sleep(every);
                println!();
            }
        }
        _ => Err(Error::Usage("`maps` takes at most one process id".into())),
    }
}

/// Serves the built-in counts of this process's descendants at `http://ADDRESS/metrics` from a
/// thread of its own, until the process ends.
fn serve_metrics(
    address: std::net::SocketAddr,
    options: egpu::host::builtin::MetricsOptions,
    descendants: Descendants,
) -> Result<(), Error> {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind(address)
        .map_err(|e| failed(format!("listening on {address}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| failed(format!("{address}: {e}")))?;
    eprintln!("egpu: metrics at http://{bound}/metrics");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(&stream);
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            // The rest of the request's head.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let response = if request.starts_with("GET /metrics ") {
                let processes = descendants.snapshot();
                let body = egpu::host::builtin::prometheus(&processes, options);
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            };
            let _ = (&stream).write_all(response.as_bytes());
        }
    });
    Ok(())
}

/// `--metrics`'s address, which must be a loopback one.
fn loopback(address: &str) -> Result<std::net::SocketAddr, Error> {
    let parsed: std::net::SocketAddr = address
        .parse()
        .map_err(|_| Error::Usage(format!("`--metrics {address}`: an address and port")))?;
    if !parsed.ip().is_loopback() {
        return Err(Error::Usage(format!(
            "`--metrics {address}`: a loopback address (127.0.0.1, ::1): the counts are not for \
             other machines"
        )));
    }
    Ok(parsed)
}

/// The built-in maps of this process's descendants, each opened when first seen and kept
/// mapped, so that a process that exits keeps its final counts here (it removes its shared
/// objects' names, not the memory mapped here) for the metrics served and pushed.
#[derive(Clone)]
struct Descendants {
    me: u32,
    seen: std::sync::Arc<
        std::sync::Mutex<std::collections::BTreeMap<u32, egpu::host::builtin::Builtin>>,
    >,
}

impl Descendants {
    fn new() -> Descendants {
        Descendants { me: std::process::id(), seen: Default::default() }
    }

    /// Opens the maps of descendants not seen before.
    fn refresh(&self) {
        use egpu::host::builtin;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for pid in builtin::processes() {
            if !seen.contains_key(&pid)
                && descends_from(pid, self.me)
                && let Ok(maps) = builtin::Builtin::open(pid)
            {
                seen.insert(pid, maps);
            }
        }
    }

    /// Every descendant seen so far, after a refresh.
    fn snapshot(&self) -> Vec<egpu::host::builtin::Builtin> {
        self.refresh();
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Looks for new descendants every 100 ms, from a thread of its own, so that short-lived
    /// ones are seen before they exit.
    fn watch(&self) {
        let me = self.clone();
        std::thread::spawn(move || {
            loop {
                me.refresh();
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
    }
}

#[cfg(feature = "otlp")]
fn otlp_endpoint(url: &str) -> Result<egpu::host::otlp::Endpoint, Error> {
    url.parse().map_err(|e: egpu::host::otlp::OtlpError| Error::Usage(e.to_string()))
}

#[cfg(not(feature = "otlp"))]
fn otlp_endpoint(_: &str) -> Result<std::convert::Infallible, Error> {
    Err(Error::Usage(
        "`--otlp`: this egpu was built without OTLP (cargo build --features otlp)".into(),
    ))
}

/// Pushes the descendants' metrics to an OTLP collector every so often, from a thread of its
/// own, and once more at the end.
#[cfg(feature = "otlp")]
struct OtlpPusher {
    endpoint: egpu::host::otlp::Endpoint,
    options: egpu::host::builtin::MetricsOptions,
    start_ns: u64,
    /// The last error said, so that a collector that is down is reported once, not every time.
    said: std::sync::Arc<std::sync::Mutex<String>>,
    /// Held across each push; true once the last push is made, after which the periodic pushes
    /// stop (so none taken before it arrives after it).
    finished: std::sync::Arc<std::sync::Mutex<bool>>,
}

#[cfg(feature = "otlp")]
impl OtlpPusher {
    fn start(
        endpoint: egpu::host::otlp::Endpoint,
        every: std::time::Duration,
        options: egpu::host::builtin::MetricsOptions,
        descendants: &Descendants,
    ) -> OtlpPusher {
        eprintln!("egpu: pushing metrics to {endpoint} every {every:?}");
        let pusher = OtlpPusher {
            endpoint,
            options,
            start_ns: unix_ns(),
            said: Default::default(),
            finished: Default::default(),
        };
        let (me, descendants) = (pusher.clone_for_thread(), descendants.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(every);
                let finished = me.finished.lock().unwrap_or_else(|p| p.into_inner());
                if *finished {
                    return;
                }
                me.push(&descendants);
            }
        });
        pusher
    }

    fn clone_for_thread(&self) -> OtlpPusher {
        OtlpPusher {
            endpoint: self.endpoint.clone(),
            options: self.options,
            start_ns: self.start_ns,
            said: self.said.clone(),
            finished: self.finished.clone(),
        }
    }

    fn push(&self, descendants: &Descendants) {
        let processes = descendants.snapshot();
        let body =
            egpu::host::builtin::otlp_json(&processes, self.options, self.start_ns, unix_ns());
        let result =
            egpu::host::otlp::post(&self.endpoint, &body, std::time::Duration::from_secs(5));
        let mut said = self.said.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => said.clear(),
            Err(e) if e.to_string() != *said => {
                eprintln!("egpu: pushing metrics: {e}");
                *said = e.to_string();
            }
            Err(_) => {}
        }
    }

    /// The last push: after any periodic one under way, and none after it.
    fn finish(self, descendants: &Descendants) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        *finished = true;
        self.push(descendants);
    }
}

#[cfg(not(feature = "otlp"))]
struct OtlpPusher;

#[cfg(not(feature = "otlp"))]
impl OtlpPusher {
    fn start(
        endpoint: std::convert::Infallible,
        _: std::time::Duration,
        _: egpu::host::builtin::MetricsOptions,
        _: &Descendants,
    ) -> OtlpPusher {
        match endpoint {}
    }

    fn finish(self, _: &Descendants) {}
}

/// Now, in nanoseconds since the Unix epoch.
#[cfg(feature = "otlp")]
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether process `pid` is `ancestor` or one of its descendants (from `/proc/<pid>/stat`).
fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // The parent is the second field after the command, which is in parentheses.
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let Some(Ok(parent)) = parent.map(str::parse) else { return false };
        pid = parent;
    }
    false
}
