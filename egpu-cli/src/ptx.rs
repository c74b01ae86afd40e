//! `egpu translate` and `egpu inject`: what a probe becomes in a kernel, and probes injected into
//! a PTX module.

use std::path::Path;

use egpu::ebpf::{AttachPoint, DeviceEvent, MemAccessCtx};
use egpu_device::inject::{
    DeviceProbe, InjectOptions, Kernels, WarpSampling, blocks_per_sm, inject_with,
};
use egpu_device::toolchain::{FunctionReport, Ptxas};
use egpu_device::translate::kernel_module_with;

use crate::Error;
use crate::args::{InjectArgs, TranslateArgs, attach_point};
use crate::program::{self, Contents, Loaded, ProgramName};

/// `egpu translate`.
pub(crate) fn translate(a: TranslateArgs) -> Result<(), Error> {
    let usage = |message: String| Error::Usage { command: "translate", message };
    let name = ProgramName::parse(&a.program);
    let loaded = match program::read(&name)? {
        Contents::Code(code) => {
            let attach = a.attach.unwrap_or(AttachPoint::Device(DeviceEvent::GlobalLoad));
            if matches!(attach, AttachPoint::Host(..)) {
                return Err(usage(format!("{attach} runs on the host, not in a kernel")));
            }
            program::from_code(&name, code, attach, &a.maps)?
        }
        Contents::Pack(pack) => {
            if !a.maps.is_empty() {
                return Err(usage(format!(
                    "`--map` declares the maps of assembly and bytecode; {name} is a pack's, \
                     which carries its own"
                )));
            }
            let mut probes = program::from_pack(&name, &pack)?;
            let (Some(probe), true) = (probes.pop(), probes.is_empty()) else {
                return Err(Error::Failed(format!(
                    "{name} holds {} probes: name one, as {name}:NAME ({})",
                    pack.probes().len(),
                    program::names(&pack)
                )));
            };
            let at = probe.verified.program().attach_point();
            if let Some(attach) = a.attach
                && attach != at
            {
                return Err(usage(format!("`--attach {attach}`: {} is a {at} probe", probe.name)));
            }
            if !at.is_device() && !matches!(at, AttachPoint::User { .. }) {
                return Err(Error::Failed(format!(
                    "{} is a {at} probe: it runs on the host, not in a kernel",
                    probe.name
                )));
            }
            probe
        }
    };
    let module = kernel_module_with(&loaded.verified, &a.kernel, &loaded.bindings)
        .map_err(|e| Error::Failed(format!("{}: {e}", loaded.name)))?;
    print!("{module}");
    Ok(())
}

/// The programs one `--probe [ATTACH=]PROGRAM` names.
fn probe_flag(spec: &str, maps: &[crate::args::MapFlag]) -> Result<(Vec<Loaded>, bool), Error> {
    let usage = |message: String| Error::Usage { command: "inject", message };
    let (attach, program) = match spec.split_once('=') {
        Some((attach, program)) if !Path::new(spec).exists() => {
            let attach =
                attach_point(attach).map_err(|why| usage(format!("`--probe {spec}`: {why}")))?;
            if !attach.is_device() {
                return Err(usage(format!(
                    "`--probe {spec}`: {attach} is not a device attach point"
                )));
            }
            (Some(attach), program)
        }
        _ => (None, spec),
    };
    let name = ProgramName::parse(program);
    match program::read(&name)? {
        Contents::Code(code) => {
            let Some(attach) = attach else {
                return Err(usage(format!(
                    "`--probe {spec}`: expected ATTACH=PROGRAM (assembly and bytecode do not say \
                     where they attach)"
                )));
            };
            Ok((vec![program::from_code(&name, code, attach, maps)?], true))
        }
        Contents::Pack(pack) => {
            let probes = program::from_pack(&name, &pack)?;
            let named = name.probe.is_some();
            let chosen: Vec<Loaded> = probes
                .into_iter()
                .filter(|p| {
                    let at = p.verified.program().attach_point();
                    named || (at.is_device() && attach.is_none_or(|a| a == at))
                })
                .collect();
            for p in &chosen {
                let at = p.verified.program().attach_point();
                if let Some(attach) = attach
                    && attach != at
                {
                    return Err(usage(format!("`--probe {spec}`: {} is a {at} probe", p.name)));
                }
                if !at.is_device() {
                    return Err(Error::Failed(format!(
                        "{} is a {at} probe, not a device probe",
                        p.name
                    )));
                }
            }
            if chosen.is_empty() {
                let at = attach.map_or(String::new(), |a| format!(" at {a}"));
                return Err(Error::Failed(format!(
                    "{name} has no device probes{at} (it has {})",
                    program::names(&pack)
                )));
            }
            Ok((chosen, false))
        }
    }
}

/// The PTX of the module file at `path`: its text, a cubin's kept PTX, or a fat binary's for a
/// device of architecture `arch` (the newest when `None`).
fn module_ptx(path: &Path, arch: Option<u32>) -> Result<(String, Registers), Error> {
    use egpu_device::image::{ModulePtx, module_ptx, register_counts};
    let module = path.display();
    let bytes = std::fs::read(path).map_err(|e| Error::Failed(format!("reading {module}: {e}")))?;
    let failed = |why: String| Error::Failed(format!("{module}: {why}"));
    match module_ptx(&bytes, arch.unwrap_or(u32::MAX)).map_err(|e| failed(e.to_string()))? {
        // The registers its machine code takes (a cubin's, a fat binary's for `--arch`).
        ModulePtx::Ptx(ptx) => {
            Ok((ptx, register_counts(&bytes, arch.unwrap_or(0)).into_iter().collect()))
        }
        ModulePtx::CubinWithout { .. } => Err(failed("a cubin that keeps no PTX".into())),
        ModulePtx::FatbinWithout => Err(failed(match arch {
            Some(arch) => format!("a fat binary with no PTX for sm_{arch}"),
            None => "a fat binary with no PTX (cubins only)".into(),
        })),
    }
}

/// Registers per thread, by kernel.
type Registers = std::collections::BTreeMap<String, u32>;

/// `egpu inject`.
pub(crate) fn inject_cmd(a: InjectArgs) -> Result<(), Error> {
    let mut programs = Vec::new();
    let mut code = false;
    for spec in &a.probes {
        let (loaded, is_code) = probe_flag(spec, &a.maps)?;
        programs.extend(loaded);
        code |= is_code;
    }
    if !code && !a.maps.is_empty() {
        return Err(Error::Usage {
            command: "inject",
            message: "`--map` declares the maps of assembly and bytecode programs; a pack's \
                      probes carry their own"
                .into(),
        });
    }
    let module = a.module.display().to_string();
    let (ptx, registers) = module_ptx(&a.module, a.arch)?;
    let names: Vec<&str> = a.kernels.iter().map(String::as_str).collect();
    let selection = if names.is_empty() { Kernels::All } else { Kernels::Named(&names) };
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| DeviceProbe { program: &p.verified, kernels: selection, maps: &p.bindings })
        .collect();
    // A pack's probes sampled by warps or blocks run in a copy of each kernel for those warps.
    let sampled = WarpSampling::of(programs.iter().map(|p| p.sample)).map_err(Error::Failed)?;
    let options = InjectOptions {
        tensor_boxes: a.tensor_boxes,
        registers,
        sampled,
        defer_misses: a.defer_misses,
        ..Default::default()
    };
    let injected = inject_with(&ptx, &probes, &options)
        .map_err(|e| Error::Failed(format!("{module}: {e}")))?;
    // A kernel named that the module lacks is a mistake, not an empty selection.
    let parsed = egpu_device::ptx::PtxModule::parse(&ptx)
        .map_err(|e| Error::Failed(format!("{module}: {e}")))?;
    let kernels: Vec<&str> = parsed.entries().map(|f| f.name.as_str()).collect();
    if let Some(missing) = names.iter().find(|n| !kernels.contains(n)) {
        let has = if kernels.is_empty() {
            "it has no kernels".to_string()
        } else {
            format!("its kernels: {}", kernels.join(", "))
        };
        return Err(Error::Failed(format!("{module} has no kernel `{missing}` ({has})")));
    }
    for s in &injected.sites {
        let size = match (s.class, s.size) {
            (_, 0) if matches!(s.event, DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
                String::new()
            }
            (MemAccessCtx::TENSOR_COPY, _) => ", tensor copy (its box is in its tensor map)".into(),
            (MemAccessCtx::LOAD_STORE, n) => format!(", {n} bytes"),
            (class, 0) => {
                format!(", {} (bytes known at run time)", MemAccessCtx::class_name(class))
            }
            (class, n) => format!(", {} of {n} bytes", MemAccessCtx::class_name(class)),
        };
        let event = AttachPoint::Device(s.event);
        eprintln!("{module}:{}: {event} in {}{size}", s.line, s.function);
    }
    eprintln!(
        "{module}: observed {} of {} global memory instructions",
        injected.observed, injected.memory_instructions
    );
    for u in &injected.unobserved {
        eprintln!(
            "{module}:{}: `{}` in {} not observed ({}): {}",
            u.line,
            u.opcode,
            u.function,
            u.class.name(),
            u.reason
        );
    }
    // With probes at memory accesses, the accesses they miss; without, none is expected.
    let at_accesses = probes.iter().any(|p| {
        !matches!(
            p.program.program().attach_point(),
            AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit)
        )
    });
    for s in injected.uncovered.iter().filter(|_| at_accesses) {
        let event = AttachPoint::Device(s.event);
        eprintln!("{module}:{}: {event} in {} observed, but no probe attaches", s.line, s.function);
    }
    if injected.hints > 0 {
        eprintln!(
            "{module}: {} hints (prefetch, discard, applypriority) move no data: not global \
             memory instructions",
            injected.hints
        );
    }
    if injected.runs > 0 {
        let runs = if injected.runs == 1 { "run" } else { "runs" };
        eprintln!(
            "{module}: {} accesses in {} {runs} of straight-line code: probes that only add the \
             size run once per run, at its last access, with the run's total",
            injected.in_runs, injected.runs
        );
    }
    if injected.summarized > 0 {
        eprintln!(
            "{module}: {} accesses whose probes only add counts and sizes to the kernel's values: they \
             add them to registers, flushed when a thread exits",
            injected.summarized
        );
    }
    eprintln!("{} sites", injected.sites.len());
    if a.registers {
        for line in register_costs(&ptx, &injected.ptx, &injected.kernels, &names)? {
            eprintln!("{module}: {line}");
        }
    }
    match a.output {
        Some(path) => std::fs::write(&path, &injected.ptx)
            .map_err(|e| Error::Failed(format!("writing {}: {e}", path.display())))?,
        None => print!("{}", injected.ptx),
    }
    Ok(())
}

/// `egpu inject --registers`: each instrumented kernel (of `kernels`, those named in `named`
/// when any) compiled by ptxas before (`original`) and after (`instrumented`), one line each.
fn register_costs(
    original: &str,
    instrumented: &str,
    kernels: &[String],
    named: &[&str],
) -> Result<Vec<String>, Error> {
    let ptxas =
        Ptxas::find().map_err(|e| Error::Failed(format!("--registers needs ptxas: {e}")))?;
    // `.target sm_90a, debug`: ptxas takes `sm_90a`; the SM's limits are sm_90's.
    let module = egpu_device::ptx::PtxModule::parse(original).ok();
    let (target, sm) = module
        .as_ref()
        .and_then(|m| m.target())
        .map_or(("sm_90".to_owned(), 90), |(t, sm)| (t.to_owned(), sm));
    let compile = |ptx: &str, what: &str| {
        ptxas
            .check(ptx, &target)
            .map_err(|e| Error::Failed(format!("ptxas, the {what} module: {e}")))
    };
    let (before, after) = (compile(original, "original")?, compile(instrumented, "instrumented")?);
    let mut lines = Vec::new();
    for kernel in kernels.iter().filter(|k| named.is_empty() || named.contains(&k.as_str())) {
        let (Some(b), Some(a)) = (before.function(kernel), after.function(kernel)) else {
            continue;
        };
        let (Some(rb), Some(ra)) = (b.registers, a.registers) else { continue };
        let local = |f: &FunctionReport| f.stack_frame.max(f.spill_stores);
        let blocks = |threads: u32| {
            let per_sm =
                |r| blocks_per_sm(r, threads, sm).map_or("?".to_owned(), |n| n.to_string());
            format!("{} -> {}", per_sm(rb), per_sm(ra))
        };
        lines.push(format!(
            "{kernel}: registers {rb} -> {ra}, local memory {} -> {} bytes, blocks of 256 threads \
             per SM {} (128: {}, 512: {}, 1024: {})",
            local(b),
            local(a),
            blocks(256),
            blocks(128),
            blocks(512),
            blocks(1024)
        ));
    }
    Ok(lines)
}
