//! NVIDIA's compiler tools, run as programs: `ptxas` checks PTX, `nvcc` compiles CUDA C to PTX
//! (and to fat binaries, for tests of their reader).
//!
//! Neither needs a GPU or a driver, so tests use them on machines without either: `ptxas`
//! assembles PTX for a target such as `sm_90` exactly as the driver's JIT would, refusing what the
//! driver would refuse, and reports each function's registers and local memory; `nvcc` turns the
//! CUDA C kernels of the test corpus into the PTX a real kernel carries.
//!
//! The tools are found through the environment only: [`Ptxas::find`] takes `EGPU_PTXAS`, else
//! `ptxas` on `PATH`, and [`Nvcc::find`] takes `EGPU_NVCC`, else `nvcc` on `PATH`. The test
//! command (`scripts/test`) installs both from NVIDIA's PyPI wheels with `scripts/cuda-tools`
//! and sets the two variables. Tests reach them through [`testing::require_ptxas`] and
//! [`testing::require_nvcc`], which skip with a printed reason, or fail under
//! `EGPU_REQUIRE_PTXAS=1`.
//!
//! ```no_run
//! use egpu_ptx::toolchain::Ptxas;
//!
//! let ptxas = Ptxas::find()?;
//! let report = ptxas.check(".version 9.0\n.target sm_90\n.address_size 64\n", "sm_90")?;
//! for f in &report.functions {
//!     println!("{}: {:?} registers", f.name, f.registers);
//! }
//! # Ok::<(), egpu_ptx::toolchain::ToolError>(())
//! ```
//!
//! [`testing::require_ptxas`]: crate::testing::require_ptxas
//! [`testing::require_nvcc`]: crate::testing::require_nvcc

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// The environment variable naming the `ptxas` to use.
pub const PTXAS_ENV: &str = "EGPU_PTXAS";

/// The environment variable naming the `nvcc` to use.
pub const NVCC_ENV: &str = "EGPU_NVCC";

/// Why a tool could not be found, run, or did not accept its input.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool is not where the environment says, nor on `PATH`.
    #[error("{tool} not found: {reason}")]
    NotFound {
        /// `ptxas` or `nvcc`.
        tool: &'static str,
        /// Where it was looked for, in words.
        reason: String,
    },
    /// The tool could not be started, or its files not written or read.
    #[error("{tool}: {what}: {source}")]
    Io {
        /// `ptxas` or `nvcc`.
        tool: &'static str,
        /// What failed: `running /path/to/ptxas`, `writing /tmp/…`.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `ptxas` refused the PTX.
    #[error("{}", rejected_message(arch, errors, stderr))]
    PtxasRejected {
        /// The target it was asked for, such as `sm_90`.
        arch: String,
        /// The errors that name a line of the PTX, in ptxas's order.
        errors: Vec<PtxasDiagnostic>,
        /// Everything ptxas wrote to stderr.
        stderr: String,
    },
    /// `nvcc` did not compile the file.
    #[error("nvcc could not compile {} ({status}):\n{stderr}", file.display())]
    NvccFailed {
        /// The CUDA C file.
        file: PathBuf,
        /// How nvcc exited, in words.
        status: String,
        /// Everything nvcc wrote to stderr.
        stderr: String,
    },
}

/// An error or warning of `ptxas` that names a line of the PTX
/// (`ptxas /tmp/x.ptx, line 12; error   : Unknown symbol '%r9'`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxasDiagnostic {
    /// The line of the PTX, from 1.
    pub line: usize,
    /// `error` or `warning`.
    pub severity: String,
    /// What ptxas says.
    pub message: String,
    /// The text of that line of the PTX (empty if the PTX has no such line).
    pub source_line: String,
}

fn rejected_message(arch: &str, errors: &[PtxasDiagnostic], stderr: &str) -> String {
    let mut message = format!("ptxas refused the PTX for {arch}");
    match errors.first() {
        Some(e) => {
            let _ =
                write!(message, ": line {}: {} (`{}`)", e.line, e.message, e.source_line.trim());
        }
        None => message.push_str(": no line named"),
    }
    let _ = write!(message, "\nptxas said:\n{}", stderr.trim_end());
    message
}

/// What `ptxas -v` reports for one function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FunctionReport {
    /// Its name, as in the PTX.
    pub name: String,
    /// Whether it is a kernel (`Compiling entry function …`).
    pub entry: bool,
    /// Registers per thread. Only kernels have a count when the whole module is compiled at
    /// once: device functions are compiled into their callers.
    pub registers: Option<u32>,
    /// Bytes of stack frame (local memory) per thread.
    pub stack_frame: u32,
    /// Bytes of registers spilled to local memory per thread, stored.
    pub spill_stores: u32,
    /// Bytes of spilled registers loaded back per thread.
    pub spill_loads: u32,
    /// Named barriers used, where reported.
    pub barriers: Option<u32>,
    /// Bytes of static shared memory.
    pub shared: u32,
    /// Bytes of stack of the kernel and every function it calls, where reported.
    pub cumulative_stack: Option<u32>,
}

impl FunctionReport {
    /// Whether the function touches local memory at all: a stack frame or spills.
    pub fn uses_local_memory(&self) -> bool {
        self.stack_frame > 0 || self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// What `ptxas -v` reports for a module it accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PtxasReport {
    /// Each function, in ptxas's order.
    pub functions: Vec<FunctionReport>,
    /// Bytes of global memory the module declares.
    pub global: u32,
    /// ptxas's warnings, one line each (`line N: …` for those about a line of the PTX).
    pub warnings: Vec<String>,
    /// Everything ptxas wrote to stderr.
    pub stderr: String,
}

impl PtxasReport {
    /// The report for function `name`.
    pub fn function(&self, name: &str) -> Option<&FunctionReport> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// The `ptxas` program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ptxas {
    path: PathBuf,
}

/// The `nvcc` program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Nvcc {
    path: PathBuf,
}

impl Ptxas {
    /// `ptxas` at `EGPU_PTXAS` if that is set (and not empty), else on `PATH`.
    ///
    /// # Errors
    ///
    /// [`ToolError::NotFound`] if `EGPU_PTXAS` names no file, or it is unset and `PATH` has no
    /// `ptxas`.
    pub fn find() -> Result<Ptxas, ToolError> {
        let path =
            find_tool("ptxas", PTXAS_ENV, std::env::var_os(PTXAS_ENV), std::env::var_os("PATH"))?;
        Ok(Ptxas { path })
    }

    /// The `ptxas` at `path`, unchecked.
    pub fn at(path: impl Into<PathBuf>) -> Ptxas {
        Ptxas { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its version line: `Cuda compilation tools, release 13.0, V13.0.88`.
    ///
    /// # Errors
    ///
    /// [`ToolError::Io`] if it cannot be run.
    pub fn version(&self) -> Result<String, ToolError> {
        version("ptxas", &self.path)
    }

    /// Assembles `ptx` for `arch` (such as `sm_90`) with `ptxas -v`, and returns what it reports.
    /// The PTX goes through a temporary file, removed afterwards, as does the machine code.
    ///
    /// # Errors
    ///
    /// [`ToolError::PtxasRejected`] with ptxas's errors and the lines of the PTX they name, if
    /// ptxas refuses the PTX; [`ToolError::Io`] if the files cannot be written or ptxas run.
    pub fn check(&self, ptx: &str, arch: &str) -> Result<PtxasReport, ToolError> {
        self.compile(ptx, arch).map(|(report, _)| report)
    }

    /// Compiles `ptx` for `arch` as [`Ptxas::check`] does: its report, and the cubin.
    ///
    /// # Errors
    ///
    /// As [`Ptxas::check`]'s, and [`ToolError::Io`] if the cubin cannot be read.
    pub fn compile(&self, ptx: &str, arch: &str) -> Result<(PtxasReport, Vec<u8>), ToolError> {
        let input = TempFile::new("ptx");
        let cubin = TempFile::new("cubin");
        std::fs::write(&input.0, ptx).map_err(|source| ToolError::Io {
            tool: "ptxas",
            what: format!("writing {}", input.0.display()),
            source,
        })?;
        let output = run(
            "ptxas",
            Command::new(&self.path)
                .arg(format!("-arch={arch}"))
                .arg("-v")
                .arg("-o")
                .arg(&cubin.0)
                .arg(&input.0),
        )?;
        let stderr = text_of(&output);
        if output.status.success() {
            let bytes = std::fs::read(&cubin.0).map_err(|source| ToolError::Io {
                tool: "ptxas",
                what: format!("reading {}", cubin.0.display()),
                source,
            })?;
            Ok((parse_report(&stderr), bytes))
        } else {
            let errors = parse_diagnostics(&stderr, ptx)
                .into_iter()
                .filter(|d| d.severity == "error")
                .collect();
            Err(ToolError::PtxasRejected { arch: arch.to_owned(), errors, stderr })
        }
    }
}

impl Nvcc {
    /// `nvcc` at `EGPU_NVCC` if that is set (and not empty), else on `PATH`.
    ///
    /// # Errors
    ///
    /// [`ToolError::NotFound`] if `EGPU_NVCC` names no file, or it is unset and `PATH` has no
    /// `nvcc`.
    pub fn find() -> Result<Nvcc, ToolError> {
        let path =
            find_tool("nvcc", NVCC_ENV, std::env::var_os(NVCC_ENV), std::env::var_os("PATH"))?;
        Ok(Nvcc { path })
    }

    /// The `nvcc` at `path`, unchecked.
    pub fn at(path: impl Into<PathBuf>) -> Nvcc {
        Nvcc { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its version line: `Cuda compilation tools, release 13.0, V13.0.88`.
    ///
    /// # Errors
    ///
    /// [`ToolError::Io`] if it cannot be run.
    pub fn version(&self) -> Result<String, ToolError> {
        version("nvcc", &self.path)
    }

    /// Compiles the CUDA C file `cu` to PTX for `arch` (such as `sm_90`) with
    /// `nvcc -arch=ARCH -ptx`, and returns the PTX. nvcc uses the host's C++ compiler to
    /// preprocess.
    ///
    /// # Errors
    ///
    /// [`ToolError::NvccFailed`] with nvcc's messages if it does not compile the file;
    /// [`ToolError::Io`] if nvcc cannot be run or its output read.
    pub fn compile_ptx(&self, cu: &Path, arch: &str) -> Result<String, ToolError> {
        let ptx = self.compile(cu, &[&format!("-arch={arch}"), "-ptx"], "ptx")?;
        String::from_utf8(ptx).map_err(|_| ToolError::NvccFailed {
            file: cu.to_owned(),
            status: "its PTX is not UTF-8".into(),
            stderr: String::new(),
        })
    }

    /// Compiles the CUDA C file `cu` to a fat binary with `nvcc -fatbin` and the arguments
    /// `args` (the targets, `-arch=sm_90` or `-gencode …`, and options such as
    /// `-Xfatbin=-compress-mode=speed`), and returns its bytes.
    ///
    /// # Errors
    ///
    /// As [`Nvcc::compile_ptx`].
    pub fn compile_fatbin(&self, cu: &Path, args: &[&str]) -> Result<Vec<u8>, ToolError> {
        self.compile(cu, &[args, &["-fatbin"]].concat(), "fatbin")
    }

    /// Runs `nvcc ARGS -o OUT CU` and returns what it wrote to OUT (a file with `extension`).
    fn compile(&self, cu: &Path, args: &[&str], extension: &str) -> Result<Vec<u8>, ToolError> {
        let out = TempFile::new(extension);
        let output =
            run("nvcc", Command::new(&self.path).args(args).arg("-o").arg(&out.0).arg(cu))?;
        if !output.status.success() {
            return Err(ToolError::NvccFailed {
                file: cu.to_owned(),
                status: output.status.to_string(),
                stderr: text_of(&output),
            });
        }
        std::fs::read(&out.0).map_err(|source| ToolError::Io {
            tool: "nvcc",
            what: format!("reading its output {}", out.0.display()),
            source,
        })
    }
}

/// A file name in the temporary folder, unique in this process and among processes; the file
/// (if one was made) is removed when this is dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(extension: &str) -> TempFile {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("egpu-{}-{n}-{nanos:09}.{extension}", std::process::id());
        TempFile(std::env::temp_dir().join(name))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run(tool: &'static str, command: &mut Command) -> Result<Output, ToolError> {
    command.output().map_err(|source| ToolError::Io {
        tool,
        what: format!("running {}", Path::new(command.get_program()).display()),
        source,
    })
}

/// stderr, then stdout if there is any (the tools write their messages to stderr).
fn text_of(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.stdout.is_empty() {
        text.push_str(&String::from_utf8_lossy(&output.stdout));
    }
    text
}

fn version(tool: &'static str, path: &Path) -> Result<String, ToolError> {
    let output = run(tool, Command::new(path).arg("--version"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find(|l| l.starts_with("Cuda compilation tools"));
    Ok(line.or_else(|| stdout.lines().last()).unwrap_or_default().trim().to_owned())
}

/// Finds `tool`: at the path in the environment variable `env` (whose value is `env_value`) if
/// that is set and not empty, else in the folders of `path_var` (the value of `PATH`).
pub(crate) fn find_tool(
    tool: &'static str,
    env: &str,
    env_value: Option<OsString>,
    path_var: Option<OsString>,
) -> Result<PathBuf, ToolError> {
    if let Some(value) = env_value.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(ToolError::NotFound {
                tool,
                reason: format!("{env}={} is not an executable file", path.display()),
            })
        };
    }
    let found = path_var
        .as_deref()
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(tool))
        .find(|candidate| is_executable(candidate));
    found.ok_or_else(|| ToolError::NotFound {
        tool,
        reason: format!(
            "{env} is not set and there is no {tool} on PATH (scripts/cuda-tools installs one \
             from PyPI)"
        ),
    })
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// The first number in `s`.
fn number(s: &str) -> Option<u32> {
    let digits: String = s
        .trim_start()
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads the `ptxas -v` report of a successful run.
fn parse_report(stderr: &str) -> PtxasReport {
    let mut report = PtxasReport { stderr: stderr.to_owned(), ..PtxasReport::default() };
    // The function the following lines are about.
    let mut current: Option<usize> = None;
    let select = |report: &mut PtxasReport, name: &str| -> usize {
        match report.functions.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                report
                    .functions
                    .push(FunctionReport { name: name.to_owned(), ..Default::default() });
                report.functions.len() - 1
            }
        }
    };
    for line in stderr.lines() {
        if let Some(d) = diagnostic(line, "") {
            if d.severity == "warning" {
                report.warnings.push(format!("line {}: {}", d.line, d.message));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("ptxas warning") {
            report.warnings.push(rest.trim_start_matches([' ', ':']).to_owned());
            continue;
        }
        let info = line.strip_prefix("ptxas info").map(|r| r.trim_start_matches([' ', ':']));
        match info {
            Some(rest) if rest.starts_with("Compiling entry function") => {
                let name = rest.split('\'').nth(1).unwrap_or_default();
                let i = select(&mut report, name);
                report.functions[i].entry = true;
                current = Some(i);
            }
            Some(rest) if rest.starts_with("Function properties for") => {
                let name = rest.trim_start_matches("Function properties for").trim();
                current = Some(select(&mut report, name));
            }
            Some(rest) if rest.starts_with("Used") => {
                let Some(f) = current.and_then(|i| report.functions.get_mut(i)) else { continue };
                for item in rest.split(',') {
                    let item = item.trim();
                    let n = number(item);
                    if item.ends_with("registers") {
                        f.registers = n;
                    } else if item.ends_with("barriers") {
                        f.barriers = n;
                    } else if item.ends_with("bytes smem") {
                        f.shared = n.unwrap_or(0);
                    } else if item.ends_with("cumulative stack size") {
                        f.cumulative_stack = n;
                    }
                }
            }
            Some(rest) if rest.ends_with("bytes gmem") && current.is_none() => {
                report.global = number(rest).unwrap_or(0);
            }
            Some(_) => {}
            None if line.contains("bytes stack frame") => {
                let Some(f) = current.and_then(|i| report.functions.get_mut(i)) else { continue };
                for item in line.split(',') {
                    let n = number(item).unwrap_or(0);
                    if item.contains("stack frame") {
                        f.stack_frame = n;
                    } else if item.contains("spill stores") {
                        f.spill_stores = n;
                    } else if item.contains("spill loads") {
                        f.spill_loads = n;
                    }
                }
            }
            None => {}
        }
    }
    report
}

/// The diagnostics of ptxas that name a line: `ptxas FILE, line N; SEVERITY : MESSAGE`, with
/// that line of `ptx`.
fn parse_diagnostics(stderr: &str, ptx: &str) -> Vec<PtxasDiagnostic> {
    stderr.lines().filter_map(|l| diagnostic(l, ptx)).collect()
}

/// One line of ptxas's output as a diagnostic, if it names a line of `ptx`.
fn diagnostic(l: &str, ptx: &str) -> Option<PtxasDiagnostic> {
    let (_, rest) = l.strip_prefix("ptxas ")?.split_once(", line ")?;
    let (line, rest) = rest.split_once(';')?;
    let line: usize = line.trim().parse().ok()?;
    let (severity, message) = rest.split_once(':')?;
    Some(PtxasDiagnostic {
        line,
        severity: severity.trim().to_owned(),
        message: message.trim().to_owned(),
        source_line: ptx.lines().nth(line.wrapping_sub(1)).unwrap_or_default().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What ptxas 13.0 printed for tests/ptx/reduce.ptx, and for a kernel with a local array.
    const REDUCE: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'reduce' for 'sm_90'
ptxas info    : Function properties for reduce
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 9 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 3.853 ms
ptxas info    : Function properties for _Z3mixj
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
";
    const LOCAL: &str = "\
ptxas /tmp/egpu-1-0.ptx, line 7; warning : Instruction 'vote' without '.sync' is deprecated
ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : 16 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
    256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 16.181 ms
";

    #[test]
    fn reads_registers_barriers_and_shared_memory() {
        let report = parse_report(REDUCE);
        assert_eq!(report.global, 0);
        assert_eq!(
            report.functions,
            vec![
                FunctionReport {
                    name: "reduce".into(),
                    entry: true,
                    registers: Some(9),
                    barriers: Some(1),
                    shared: 1024,
                    ..Default::default()
                },
                FunctionReport { name: "_Z3mixj".into(), ..Default::default() },
            ]
        );
        assert!(!report.function("reduce").unwrap().uses_local_memory());
    }

    #[test]
    fn reads_local_memory_spills_and_warnings() {
        let report = parse_report(LOCAL);
        assert_eq!(report.global, 16);
        let f = report.function("spill").unwrap();
        assert_eq!((f.stack_frame, f.spill_stores, f.spill_loads), (256, 8, 12));
        assert_eq!((f.registers, f.cumulative_stack), (Some(72), Some(256)));
        assert!(f.uses_local_memory());
        assert_eq!(report.warnings.len(), 2);
        assert_eq!(report.warnings[0], "line 7: Instruction 'vote' without '.sync' is deprecated");
        assert!(report.warnings[1].starts_with("For profile sm_90"), "{:?}", report.warnings);
    }

    #[test]
    fn names_the_offending_line() {
        let ptx = ".version 9.0\n.target sm_90\n\tadd.s32 %r1, %r2, %r9;\n";
        let stderr = "ptxas /tmp/egpu-1.ptx, line 3; error   : Arguments mismatch for instruction 'add'\n\
                      ptxas /tmp/egpu-1.ptx, line 3; error   : Unknown symbol '%r9'\n\
                      ptxas /tmp/egpu-1.ptx, line 99; warning : far away\n\
                      ptxas fatal   : Ptx assembly aborted due to errors\n";
        let d = parse_diagnostics(stderr, ptx);
        assert_eq!(d.len(), 3);
        assert_eq!(d[1].line, 3);
        assert_eq!(d[1].severity, "error");
        assert_eq!(d[1].message, "Unknown symbol '%r9'");
        assert_eq!(d[1].source_line, "\tadd.s32 %r1, %r2, %r9;");
        assert_eq!((d[2].severity.as_str(), d[2].source_line.as_str()), ("warning", ""));
        let error = ToolError::PtxasRejected {
            arch: "sm_90".into(),
            errors: d[..2].to_vec(),
            stderr: stderr.into(),
        };
        let message = error.to_string();
        assert!(
            message.starts_with(
                "ptxas refused the PTX for sm_90: line 3: Arguments mismatch for instruction 'add' \
                 (`add.s32 %r1, %r2, %r9;`)"
            ),
            "{message}"
        );
        assert!(message.contains("Ptx assembly aborted"), "{message}");
    }

    #[test]
    fn finds_tools_through_the_environment_then_path() {
        let dir = std::env::temp_dir().join(format!("egpu-find-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let tool = bin.join("ptxas");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let plain = dir.join("not-executable");
        std::fs::write(&plain, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let path_var = std::env::join_paths([dir.join("nothing-here"), bin.clone()]).unwrap();

        let found = find_tool("ptxas", PTXAS_ENV, None, Some(path_var.clone())).unwrap();
        assert_eq!(found, tool);
        let found = find_tool("ptxas", PTXAS_ENV, Some("".into()), Some(path_var.clone())).unwrap();
        assert_eq!(found, tool, "an empty variable counts as unset");
        let found = find_tool("ptxas", PTXAS_ENV, Some(tool.clone().into()), None).unwrap();
        assert_eq!(found, tool);

        let err =
            find_tool("ptxas", PTXAS_ENV, Some(plain.clone().into()), Some(path_var)).unwrap_err();
        assert!(err.to_string().contains("EGPU_PTXAS="), "{err}");
        assert!(err.to_string().contains("is not an executable file"), "{err}");
        let err = find_tool("nvcc", NVCC_ENV, None, Some(bin.into())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("nvcc not found: EGPU_NVCC is not set and there is no nvcc"),
            "{err}"
        );
        assert!(matches!(find_tool("nvcc", NVCC_ENV, None, None), Err(ToolError::NotFound { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn temporary_names_are_unique() {
        let a = TempFile::new("ptx");
        let b = TempFile::new("ptx");
        assert_ne!(a.0, b.0);
        assert!(a.0.starts_with(std::env::temp_dir()));
    }

    #[test]
    fn a_missing_program_is_an_io_error() {
        let ptxas = Ptxas::at("/nonexistent/egpu/ptxas");
        let err = ptxas.check("", "sm_90").unwrap_err();
        assert!(matches!(err, ToolError::Io { tool: "ptxas", .. }), "{err}");
        assert!(err.to_string().contains("running /nonexistent/egpu/ptxas"), "{err}");
    }
}
