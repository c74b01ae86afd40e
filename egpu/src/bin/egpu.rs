//! The `egpu` command line.
//!
//! ```text
//! egpu translate PROGRAM [--attach ATTACH] [--kernel NAME] [--map MAP]...
//! egpu inject MODULE.ptx --probe ATTACH=PROGRAM... [--kernel NAME]... [--map MAP]... [-o OUT.ptx]
//! ```
//!
//! A PROGRAM is an eBPF program file: assembly text (bpf_conformance syntax, as `egpu::ebpf::asm`
//! reads it), or bytecode (little-endian 8-byte instructions, as `Program::to_bytes` writes them
//! and as a Rust probe's `program().to_bytes()` gives). Every program is verified first, with the
//! maps the `--map` flags declare as its map table (`map[0]`, `map[1]`, … in their order).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use egpu::ebpf::verifier::{Verified, verify};
use egpu::ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
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

PROGRAM is eBPF assembly text or bytecode (little-endian 8-byte instructions).
MAP declares the next entry of every program's map table (map[0], map[1], ...):
  NAME=KIND:KEY:VALUE:ENTRIES[:SM_SHARDS][@ADDRESS]
  KIND is hash, array, percpu_hash, percpu_array or ringbuf; KEY and VALUE are sizes in bytes
  (KEY 4 for arrays, 0 for ring buffers); SM_SHARDS (default 0, or 132 for per-CPU kinds) gives
  per-SM shards; ADDRESS (hexadecimal, default 0) is where the map lies in GPU memory, which the
  code uses as a constant: with the default, the PTX is for reading, not for loading.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("translate") => translate(&args[1..]),
        Some("inject") => inject_cmd(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(Error::Usage("expected a subcommand, `translate` or `inject`".into())),
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

/// A `--map NAME=KIND:KEY:VALUE:ENTRIES[:SM_SHARDS][@ADDRESS]` flag: the map's definition and
/// where the GPU finds it.
fn map_flag(flag: &str) -> Result<(MapDef, DeviceMap), Error> {
    let bad = |why: &str| Error::Usage(format!("`--map {flag}`: {why}"));
    let (name, rest) = flag.split_once('=').ok_or_else(|| bad("expected NAME=KIND:..."))?;
    let (spec, addr) = match rest.split_once('@') {
        Some((spec, addr)) => {
            let digits = addr.trim_start_matches("0x");
            let addr = u64::from_str_radix(digits, 16)
                .map_err(|_| bad("the address is a hexadecimal number"))?;
            (spec, addr)
        }
        None => (rest, 0),
    };
    let fields: Vec<&str> = spec.split(':').collect();
    let (kind, numbers) = match fields.as_slice() {
        [kind, numbers @ ..] if (3..=4).contains(&numbers.len()) => (kind, numbers),
        _ => return Err(bad("expected KIND:KEY:VALUE:ENTRIES[:SM_SHARDS]")),
    };
    let kind = MapKind::from_name(kind)
        .ok_or_else(|| bad("the kind is one of hash, array, percpu_hash, percpu_array, ringbuf"))?;
    let numbers = numbers
        .iter()
        .map(|n| n.parse::<u32>())
        .collect::<Result<Vec<u32>, _>>()
        .map_err(|_| bad("sizes, entries and shards are numbers"))?;
    let per_cpu = matches!(kind, MapKind::PerCpuHash | MapKind::PerCpuArray);
    let sm_shards = numbers.get(3).copied().unwrap_or(if per_cpu { 132 } else { 0 });
    let (key_size, value_size, max_entries) = (numbers[0], numbers[1], numbers[2]);
    // Per-CPU kinds: a host shard and the SM shards. Others: one host shard, or SM shards only
    // (a ring per SM).
    let cpu_shards = if per_cpu || sm_shards == 0 { 1 } else { 0 };
    let geometry = Geometry::new(kind, key_size, value_size, max_entries, cpu_shards, sm_shards)
        .map_err(|e| bad(&e.to_string()))?;
    let def = MapDef { name: name.to_owned(), kind, key_size, value_size, max_entries };
    Ok((def, DeviceMap { addr, geometry, live: false }))
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
