//! `egpu mem run`: `egpu run` with the built-in sets' pack as its probes and `EGPU_MEM_OUT`
//! naming where each process writes its recording; then the table of each recording. `egpu mem
//! report`: the tables of recordings already written. `egpu mem render`: their pictures
//! (`render/`), which `egpu mem run --out DIR` also draws into DIR at the end.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use egpu::host::mem::{Recording, Set, table};

use crate::args::{
    MemCommand, MemRenderArgs, MemReportArgs, MemRunArgs, MemWhatIfArgs, OtlpProtocol, RunArgs,
};
use crate::{Error, failed};

/// `egpu mem`.
pub(crate) fn mem_cmd(command: MemCommand) -> Result<ExitCode, Error> {
    match command {
        MemCommand::Run(a) => run(a),
        MemCommand::Report(a) => report(a).map(|()| ExitCode::SUCCESS),
        MemCommand::Render(a) => render(a).map(|()| ExitCode::SUCCESS),
        MemCommand::WhatIf(a) => what_if(a).map(|()| ExitCode::SUCCESS),
    }
}

/// A folder of egpu's own, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(a: MemRunArgs) -> Result<ExitCode, Error> {
    let (out, _scratch) = match &a.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
            (dir.canonicalize().map_err(|e| failed(format!("{}: {e}", dir.display())))?, None)
        }
        None => {
            let dir = std::env::temp_dir().join(format!("egpu-mem-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
            (dir.clone(), Some(Scratch(dir)))
        }
    };
    // Recordings of an earlier run in the same folder would be read as this run's.
    for old in recordings_in(&out)? {
        std::fs::remove_file(&old).map_err(|e| failed(format!("{}: {e}", old.display())))?;
    }
    let sampling = a.sample.of(a.sample_by);
    let pack = egpu::host::mem::pack_sampled(&a.sets, a.page_size, sampling).map_err(failed)?;
    let pack_path = out.join("sets.pack");
    std::fs::write(&pack_path, pack.to_text())
        .map_err(|e| failed(format!("{}: {e}", pack_path.display())))?;
    let sets: Vec<&str> = a.sets.iter().map(|s| s.name()).collect();
    eprintln!("egpu: mem sets {}; recordings in {}", sets.join(","), out.display());
    let env = mem_env(&a, &out);
    let run = RunArgs {
        summary: None,
        library: a.library,
        probes: Some(pack_path.to_string_lossy().into_owned()),
        metrics: None,
        kernel_names: false,
        otlp: None,
        otlp_every: std::time::Duration::from_secs(10),
        otlp_protocol: OtlpProtocol::Json,
        linger: None,
        kernel_times: a.kernel_times,
        gpu_time_report: None,
        command: a.command,
        env,
    };
    let code = crate::run::run_cmd(run)?;
    let files = recordings_in(&out)?;
    if files.is_empty() {
        eprintln!("egpu: no process wrote a recording (did the command use CUDA?)");
    }
    print_tables(&files)?;
    if a.out.is_some() {
        render_run(&files, &out)?;
    }
    Ok(code)
}

/// `egpu mem run --out DIR`'s pictures: those of each recording with kernels, into DIR (one
/// process) or DIR/PID (several).
fn render_run(files: &[PathBuf], out: &Path) -> Result<(), Error> {
    let mut with_kernels = Vec::new();
    for file in files {
        let recording = crate::render::read(file).map_err(failed)?;
        if !recording.kernels.is_empty() {
            with_kernels.push(file.clone());
        }
    }
    if with_kernels.is_empty() {
        return Ok(());
    }
    crate::render::render_files(&with_kernels, out, None).map_err(failed)?;
    eprintln!("egpu: pictures in {}", out.join("index.html").display());
    Ok(())
}

fn render(a: MemRenderArgs) -> Result<(), Error> {
    let files = expand(&a.paths)?;
    if files.is_empty() {
        return Err(failed("no `.egpumem` recording in the folders given"));
    }
    let kernels = a.kernel.as_deref().map(regex_lite::Regex::new).transpose().map_err(failed)?;
    let folders = crate::render::render_files(&files, &a.out, kernels.as_ref()).map_err(failed)?;
    for dir in folders {
        println!("{}", dir.join("index.html").display());
    }
    Ok(())
}

/// Paths given: recordings, and folders whose recordings are read.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            files.extend(recordings_in(path)?);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// The environment `egpu mem run` gives the command: where to write recordings, and the
/// options the preloaded library reads.
fn mem_env(a: &MemRunArgs, out: &Path) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("EGPU_MEM_OUT".into(), out.as_os_str().to_owned()),
        ("EGPU_MEM_PAGE_BYTES".into(), a.page_size.bytes().to_string().into()),
        ("EGPU_MEM_SAMPLE".into(), a.sample.n().to_string().into()),
        ("EGPU_MEM_MAX_RECORDS".into(), a.max_records.to_string().into()),
    ];
    if let Some(w) = a.window {
        env.push(("EGPU_MEM_WINDOW_NS".into(), w.as_nanos().to_string().into()));
    }
    if let Some(regex) = &a.kernel {
        env.push(("EGPU_KERNELS".into(), regex.into()));
    }
    // The timeline's rings hold what the SMs record between two merges: merges every 20 ms
    // (not 100) unless the environment says.
    if a.sets.contains(&Set::Timeline) && std::env::var_os("EGPU_MERGE_MS").is_none() {
        env.push(("EGPU_MERGE_MS".into(), "20".into()));
    }
    env
}

/// The `.egpumem` files in `dir`, by name.
fn recordings_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "egpumem"))
        .collect();
    files.sort();
    Ok(files)
}

/// Prints the table of each recording that holds kernels (processes that launched none, such
/// as a program's helpers, are left out); a recording that cannot be read is an error.
fn print_tables(files: &[PathBuf]) -> Result<(), Error> {
    let mut first = true;
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| failed(format!("{}: {e}", file.display())))?;
        let recording =
            Recording::parse(&text).map_err(|e| failed(format!("{}: {e}", file.display())))?;
        if recording.kernels.is_empty() {
            continue;
        }
        if !first {
            println!();
        }
        first = false;
        print!("{}", table::render(&recording));
    }
    Ok(())
}

/// `egpu mem what-if`: per recording with `timeline` samples, the line saying what they are
/// and the what-if's table; an error when none has samples.
fn what_if(a: MemWhatIfArgs) -> Result<(), Error> {
    use egpu::host::mem::cache;
    let kernels = a.kernel.as_deref().map(regex_lite::Regex::new).transpose().map_err(failed)?;
    let page_bytes = a.page_size.bytes();
    let mut shown = 0;
    for file in expand(&a.paths)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| failed(format!("{}: {e}", file.display())))?;
        let mut recording =
            Recording::parse(&text).map_err(|e| failed(format!("{}: {e}", file.display())))?;
        if let Some(k) = &kernels {
            recording = crate::render::select(recording, k);
        }
        let h = &recording.header;
        if recording.samples.is_empty() {
            let of = if kernels.is_some() { " of the kernels --kernel matches" } else { "" };
            eprintln!("egpu: {}: no timeline samples{of}", file.display());
            continue;
        }
        if shown > 0 {
            println!();
        }
        shown += 1;
        let of = h.timeline.as_ref().map_or(String::new(), |t| {
            let dropped =
                if t.dropped > 0 { format!(", {} dropped", t.dropped) } else { "".into() };
            let what = t.unit();
            match t.sample == 1 && !t.lines && t.kept == t.records && t.dropped == 0 {
                // `--sample 1` and nothing lost: the program's own sequence.
                true => format!(
                    " (every warp's requests, all {} kept: the program's sequence, a request's \
                     page its leader lane's)",
                    t.records
                ),
                false => format!(
                    " (1 in {} {what}; {} of {} records kept{dropped})",
                    t.sample, t.kept, t.records
                ),
            }
        });
        println!(
            "process {} ({}): {} sampled requests{of}",
            h.pid,
            h.command,
            recording.samples.len()
        );
        let accesses = cache::accesses_of_samples(&recording.samples, page_bytes);
        print!("{}", cache::what_if(&accesses, page_bytes));
    }
    if shown == 0 {
        return Err(failed(
            "no recording has timeline samples: run `egpu mem run --sets timeline` (and raise \
             --max-records to keep every record)",
        ));
    }
    Ok(())
}

fn report(a: MemReportArgs) -> Result<(), Error> {
    print_tables(&expand(&a.paths)?)
}
