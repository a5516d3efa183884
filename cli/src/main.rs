//! `mpicr`: transparent checkpoint/restart for unmodified MPI programs. See `mpicr --help` and
//! DESIGN.md (sections 1, 2, 5, 6, 7) for the architecture.

mod app;
mod args;
mod client;
mod compress;
mod coord_wire;
mod coordinator;
mod criu;
mod ctl;
mod docs;
mod dump_gate;
#[cfg(test)]
mod fuzz;
mod ghosts;
mod images;
mod incremental;
mod jobs;
mod keeper;
mod keeper_state;
mod log;
mod mpilib;
mod paths;
mod pidns;
mod pmi;
mod pmi_relay;
mod pmix;
mod restart;
mod restore_guard;
mod slurm;
mod sockdiag;
mod spawn;
mod stage;
mod status;
mod sys;
mod timens;

use args::{Cli, Command};

/// `eprintln!` with the whole line in one write: several keepers share the launcher's stream,
/// and a line written in pieces gets interleaved with other ranks' lines.
#[macro_export]
macro_rules! elog {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}
/// `print!`/`println!` for a command's output: a reader that went away (`mpicr status | head
/// -3`) ends the command as SIGPIPE ends a C tool, not with a panic and its backtrace.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}
/// Standard output failed: a closed pipe ends the process by SIGPIPE (what a shell reports for
/// `cmd | head`); any other error is a one-line error.
pub fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        sys::die_by_signal(libc::SIGPIPE);
    }
    elog!("mpicr: writing to standard output: {e}");
    std::process::exit(1);
}
/// Writes `s` to stderr as it is, in one write, without a newline (progress lines).
pub fn elog_raw(s: &str) {
    use std::io::Write as _;
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(s.as_bytes());
    let _ = e.flush();
}
use clap::Parser;

/// Exit code when mpicr itself fails while wrapping a program (as `env` and `timeout` do).
const EXIT_WRAPPER_FAILED: i32 = 125;
const EXIT_NOT_EXECUTABLE: i32 = 126;
const EXIT_NOT_FOUND: i32 = 127;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == pidns::INIT_ARG) {
        pidns::init_main(&args[2..]);
    }
    if let Some(code) = dump_gate::action_from_env(&args) {
        std::process::exit(code);
    }
    if let Some(code) = restore_guard::action_from_env(&args) {
        std::process::exit(code);
    }
    // Before anything could replace the binary (see `paths::exe`).
    let _ = paths::exe();
    let cli = Cli::parse();
    log::init();
    let wrapper = matches!(cli.command, Command::Run(_) | Command::Restart(_));
    let result = run(cli);
    criu::end_running();
    let code = match result {
        Ok(keeper::Outcome::Exit(code)) => code,
        Ok(keeper::Outcome::Signal(sig)) => sys::die_by_signal(sig),
        Err(e) => {
            elog!("mpicr: {}", one_line(&e));
            if wrapper && std::env::var_os("PMI_FD").is_some() {
                // The launcher ends the job as soon as this rank's PMI connection closes and may
                // drop output it has not read yet: give it a moment to forward the message.
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            if let Some(f) = e.downcast_ref::<args::Failure>() {
                std::process::exit(f.code);
            }
            match e.downcast_ref::<spawn::SpawnError>() {
                Some(spawn::SpawnError::NotFound(_)) => EXIT_NOT_FOUND,
                Some(spawn::SpawnError::NotExecutable(_)) => EXIT_NOT_EXECUTABLE,
                _ if wrapper => EXIT_WRAPPER_FAILED,
                _ => 1,
            }
        }
    };
    std::process::exit(code);
}

/// `message: cause: cause`, without repeating a cause that the message already contains.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

fn run(cli: Cli) -> anyhow::Result<keeper::Outcome> {
    match cli.command {
        Command::Run(a) => keeper::run(a),
        Command::Restart(a) => restart::restart(a),
        Command::Checkpoint(a) => client::checkpoint(a).map(|()| keeper::Outcome::Exit(0)),
        Command::Status(a) => status::status(&images::CkptDir::new(a.dir.resolve()), a.json).map(|()| keeper::Outcome::Exit(0)),
        Command::List(a) => jobs::list(a.json).map(|()| keeper::Outcome::Exit(0)),
        Command::Prune(a) => jobs::prune(&a).map(|()| keeper::Outcome::Exit(0)),
        Command::Completions(a) => docs::completions(a.shell, &mut std::io::stdout()).map(|()| keeper::Outcome::Exit(0)),
        Command::GenDocs(a) => docs::generate(&a).map(|()| keeper::Outcome::Exit(0)),
    }
}
