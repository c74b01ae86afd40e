//! `egpu run`: a command under egpu's preloaded library, with its counts served as Prometheus
//! metrics or pushed to an OpenTelemetry collector while it runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::args::RunArgs;
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
    child.args(&command[1..]).env("LD_PRELOAD", preload);
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
    let options = egpu::host::builtin::MetricsOptions::default().with_kernel_names(a.kernel_names);
    let descendants = Descendants::new();
    if a.metrics.is_some() || otlp.is_some() {
        descendants.watch();
    }
    // Listening before the command starts, so that its first scrape finds the server.
    if let Some(address) = a.metrics {
        serve_metrics(address, options, descendants.clone())?;
    }
    let pusher =
        otlp.map(|endpoint| OtlpPusher::start(endpoint, a.otlp_every, options, &descendants));
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
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
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
    let mut one = egpu::pack::Pack::new();
    for p in pack.probes().iter().filter(|p| &p.name == probe) {
        one.push(&p.name, p.program.clone(), p.maps.clone())
            .map_err(|e| Error::Failed(format!("{spec}: {e}")))?;
    }
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
