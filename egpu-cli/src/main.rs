//! The `egpu` command line.
//!
//! ```text
//! egpu translate PROGRAM [--attach ATTACH] [--kernel NAME] [--map MAP]...
//! egpu inject MODULE.ptx --probe [ATTACH=]PROGRAM... [--kernel NAME]... [--map MAP]... [-o OUT.ptx]
//! egpu run [--summary PATH] [--library PATH] [--probes PACK[:NAME]] [--metrics ADDRESS
//!          [--kernel-names]] [--otlp URL [--otlp-every SECONDS]] [--] COMMAND [ARGS]...
//! egpu maps [PID [--watch SECONDS]] [--json]
//! egpu mem run [--sets SETS] [--page-size SIZE] [--out DIR] [--library PATH] [--] COMMAND [ARGS]...
//! egpu mem report PATH...
//! egpu mem render RECORDING... --out DIR
//! egpu list [PATTERN] [-v] [--json]
//! egpu completions SHELL
//! egpu help [SUBCOMMAND]
//! ```
//!
//! A PROGRAM is named the same way everywhere (`program.rs`): eBPF assembly, bytecode, or a
//! probe pack (text or a shared library made with `egpu::export_probes!`), `PACK:NAME` for one
//! of its probes. Assembly and bytecode are verified with the maps the `--map` flags declare as
//! their map table (`map[0]`, `map[1]`, … in their order); a pack's probes carry theirs.
//!
//! Exit statuses: 0 on success, 2 for a usage error (clap's, or a value egpu refuses, with the
//! subcommand's usage line), 1 for a failure; `egpu run` exits as its command does.
//!
//! | module | holds |
//! |---|---|
//! | `args.rs` | the grammar (clap's derive types) and the parsers of flag values |
//! | `program.rs` | naming and reading a program, checking its maps against its use |
//! | `ptx.rs` | `translate` and `inject` |
//! | `run.rs` | `run`, the metrics server, the OTLP pusher |
//! | `safety.rs` | what every command egpu starts runs with: NVLink multicast off |
//! | `maps.rs` | `maps`, its JSON |
//! | `mem.rs` | `mem run` (`run` with the sets' pack), `mem report` and `mem render` |
//! | `render/` | `mem render`'s pictures and pages (plotters, an embedded font) |
//! | `list.rs` | `list`: attach points, contexts' fields and helpers, from egpu-ebpf's tables |

mod args;
mod cxl;
mod gpu_time;
mod list;
mod maps;
mod mem;
mod metrics;
mod program;
mod ptx;
mod render;
mod run;
mod safety;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};

use args::{Cli, Command};

fn main() -> ExitCode {
    // Help and version go to standard output with status 0; clap's usage errors to standard
    // error with status 2.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Translate(a) => ptx::translate(a).map(|()| ExitCode::SUCCESS),
        Command::Inject(a) => ptx::inject_cmd(a).map(|()| ExitCode::SUCCESS),
        Command::Run(a) => run::run_cmd(a),
        Command::Maps(a) => maps::maps_cmd(a).map(|()| ExitCode::SUCCESS),
        Command::Mem(m) => mem::mem_cmd(m),
        Command::Cxl(a) => cxl::cxl_cmd(a),
        Command::List(a) => list::list_cmd(a).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "egpu", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(Error::Usage { command, message }) => {
            usage_error(command, &message);
            ExitCode::from(2)
        }
        Err(Error::Failed(why)) => {
            eprintln!("egpu: {why}");
            ExitCode::FAILURE
        }
    }
}

/// Says a usage error the way clap says its own: the message, the subcommand's usage line, and
/// where help is.
fn usage_error(command: &str, message: &str) {
    let mut cli = Cli::command();
    cli.build();
    let error = match cli.find_subcommand_mut(command) {
        Some(sub) => sub.error(clap::error::ErrorKind::ValueValidation, message),
        None => cli.error(clap::error::ErrorKind::ValueValidation, message),
    };
    let _ = error.print();
}

/// Why a subcommand did not do its work.
#[derive(Debug)]
pub(crate) enum Error {
    /// The command line asks for something egpu cannot do as asked: exit status 2.
    Usage {
        /// The subcommand (for its usage line).
        command: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Something failed: exit status 1.
    Failed(String),
}

/// A failure, from anything that says why.
pub(crate) fn failed(e: impl std::fmt::Display) -> Error {
    Error::Failed(e.to_string())
}
