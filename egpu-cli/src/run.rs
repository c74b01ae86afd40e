//! `egpu run`: a command under egpu's preloaded library, with its counts served as Prometheus
//! metrics (for a while after it ends, with `--linger`) or pushed to an OpenTelemetry collector
//! while it runs; the exporters are in `metrics/`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::args::RunArgs;
use crate::metrics::{self, Descendants, Exporter};
use crate::program::{self, ProgramName};
use crate::{Error, failed};

/// `egpu run`: the command's exit status, or why it did not start.
pub(crate) fn run_cmd(a: RunArgs) -> Result<ExitCode, Error> {
    let otlp = a.otlp.as_deref().map(otlp_endpoint).transpose()?;
    let library = match a.library.or_else(|| std::env::var_os("EGPU_PRELOAD").map(PathBuf::from)) {
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
    let command = &a.command;
    let mut child = std::process::Command::new(&command[0]);
    child.args(&command[1..]).env("LD_PRELOAD", preload).envs(a.env.iter().cloned());
    // NVLink multicast off, whatever the environment says (`safety.rs`).
    for note in crate::safety::multicast_off(&mut child, |name| crate::safety::given(&a.env, name))
    {
        eprintln!("{note}");
    }
    // Read here first, so that a pack that cannot be read stops before the command starts.
    let mut one_probe = None;
    if let Some(probes) = &a.probes {
        let (path, count, written) = probes_for(probes)?;
        eprintln!("egpu: {count} probes from {probes}");
        one_probe = written.then(|| path.clone());
        child.env("EGPU_PROBES", path);
    }
    if let Some(path) = &a.summary {
        child.env("EGPU_SUMMARY", summary_base(path)?);
    }
    if a.kernel_times {
        child.env("EGPU_KERNEL_TIMES", "1");
    }
    let gpu_time_base = a.gpu_time_report.as_ref().map(|_| crate::gpu_time::base());
    if let Some(base) = &gpu_time_base {
        child.env("EGPU_GPU_TIME", base);
    }
    if otlp.is_some() {
        // Launch spans of threads with a trace context, exported with the metrics.
        child.env("EGPU_TRACES", "1");
    }
    let options = egpu::host::builtin::MetricsOptions::default().with_kernel_names(a.kernel_names);
    let mut descendants = Descendants::new();
    if otlp.is_some() {
        descendants = descendants.with_spans();
    }
    if a.metrics.is_some() || otlp.is_some() {
        descendants.watch();
        let (name, value) = descendants.keep_env();
        child.env(name, value);
    }
    // Listening before the command starts, so that its first scrape finds the server.
    let exporter = Exporter::new(descendants.clone(), options);
    let served = match a.metrics {
        Some(address) => {
            let bound = metrics::serve(address, exporter.clone())?;
            eprintln!("egpu: metrics at http://{bound}/metrics");
            Some(bound)
        }
        None => None,
    };
    let pusher = otlp.map(|endpoint| {
        OtlpPusher::start(endpoint, a.otlp_protocol, a.otlp_every, options, &descendants)
    });
    let status = child.status();
    if let Some(path) = one_probe {
        let _ = std::fs::remove_file(path);
    }
    let status = match status {
        Ok(status) => status,
        Err(e) => return Ok(not_started(&command[0], &e)),
    };
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
    exporter.command_ended(code);
    // Read (and mapped here, for `--linger`): their names can go.
    descendants.snapshot();
    descendants.remove_kept();
    if let (Some(base), Some(file)) = (&gpu_time_base, &a.gpu_time_report)
        && let Err(e) = crate::gpu_time::write(base, file)
    {
        // The command's exit status stands: the report is said to be missing.
        eprintln!("egpu: the GPU time report: {e}");
    }
    if let (Some(bound), Some(linger)) = (served, a.linger) {
        linger_for(bound, linger, code);
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// `--linger`: the metrics stay served, with their last values, for `linger` after the command
/// ended (with `code`), so that a scraper that comes by every so often sees a short job's counts.
fn linger_for(bound: std::net::SocketAddr, linger: std::time::Duration, code: i32) {
    let until = std::time::SystemTime::now()
        .checked_add(linger)
        .map(|t| format!(" until {}", humantime::format_rfc3339_seconds(t)))
        .unwrap_or_default();
    eprintln!(
        "egpu: the command exited with {code}; its last metrics stay at http://{bound}/metrics \
         for {}{until}",
        humantime::format_duration(linger)
    );
    std::thread::sleep(linger);
}

/// A command that could not be started, as a shell says it: 127 when it is not found, 126 when
/// it cannot be run.
fn not_started(command: &OsString, e: &std::io::Error) -> ExitCode {
    let shown = Path::new(command).display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            eprintln!("egpu: {shown}: command not found");
            ExitCode::from(127)
        }
        _ => {
            eprintln!("egpu: {shown}: {e}");
            ExitCode::from(126)
        }
    }
}

/// The pack `--probes` names, read (and verified) here: its path for `EGPU_PROBES`, its number
/// of probes, and whether the path is a pack of one probe written for this run (`PACK:NAME`),
/// to remove when the command ends.
fn probes_for(spec: &str) -> Result<(PathBuf, usize, bool), Error> {
    let name = ProgramName::parse(spec);
    let pack = program::read_pack(&name)?;
    let path = name
        .path
        .canonicalize()
        .map_err(|e| Error::Failed(format!("{}: {e}", name.path.display())))?;
    let Some(probe) = &name.probe else { return Ok((path, pack.probes().len(), false)) };
    // Says which probes there are when NAME is none of them.
    program::from_pack(&name, &pack)?;
    // The probe whole: its sampling and its maps' first contents too.
    let mut one = pack;
    one.retain(|p| &p.name == probe);
    let written = std::env::temp_dir().join(format!("egpu-{}-{probe}.pack", std::process::id()));
    std::fs::write(&written, one.to_text())
        .map_err(|e| Error::Failed(format!("writing {}: {e}", written.display())))?;
    Ok((written, one.probes().len(), true))
}

/// `--summary PATH`, checked before the command starts: its folder must exist and take files
/// (a tool that wrote nothing and said nothing was the alternative). Relative paths are made
/// absolute, so that a process that changes its folder writes where it was asked.
fn summary_base(path: &Path) -> Result<PathBuf, Error> {
    let shown = path.display();
    let path = std::env::current_dir()
        .map(|here| here.join(path))
        .map_err(|e| Error::Failed(format!("`--summary {shown}`: the current folder: {e}")))?;
    let folder = path.parent().unwrap_or(Path::new("/"));
    if !folder.is_dir() {
        let why = if folder.exists() { "is not a folder" } else { "does not exist" };
        return Err(Error::Failed(format!(
            "`--summary {shown}`: {} {why}: the summaries are written to {shown}.<pid>",
            folder.display()
        )));
    }
    let mut trial = path.clone().into_os_string();
    trial.push(format!(".egpu-check-{}", std::process::id()));
    std::fs::File::create(&trial).and_then(|_| std::fs::remove_file(&trial)).map_err(|e| {
        Error::Failed(format!("`--summary {shown}`: cannot write in {}: {e}", folder.display()))
    })?;
    Ok(path)
}

#[cfg(feature = "otlp")]
fn otlp_endpoint(url: &str) -> Result<egpu::host::otlp::Endpoint, Error> {
    url.parse().map_err(|e: egpu::host::otlp::OtlpError| Error::Usage {
        command: "run",
        message: format!("`--otlp {url}`: {e}"),
    })
}

#[cfg(not(feature = "otlp"))]
fn otlp_endpoint(_: &str) -> Result<std::convert::Infallible, Error> {
    Err(Error::Usage {
        command: "run",
        message: "`--otlp`: this egpu was built without OTLP (cargo build --features otlp)".into(),
    })
}

#[cfg(feature = "otlp")]
use crate::metrics::otlp::OtlpPusher;

/// Without the `otlp` feature, `--otlp` is refused before anything runs: no pusher is made.
#[cfg(not(feature = "otlp"))]
struct OtlpPusher;

#[cfg(not(feature = "otlp"))]
impl OtlpPusher {
    fn start(
        endpoint: std::convert::Infallible,
        _: crate::args::OtlpProtocol,
        _: std::time::Duration,
        _: egpu::host::builtin::MetricsOptions,
        _: &Descendants,
    ) -> OtlpPusher {
        match endpoint {}
    }

    fn finish(self, _: &Descendants) {}
}
