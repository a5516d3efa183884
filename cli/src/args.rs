//! Command-line interface (clap derive) and the small parsers it needs.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_CKPT_DIR: &str = "mpicr-ckpt";
pub const CKPT_DIR_ENV: &str = "MPICR_CKPT_DIR";
/// Durations are capped here (a year): longer ones mean "no limit" and must not overflow clocks.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 86400);

/// The sections of `mpicr --help`'s closing text; the man page (`docs.rs`) renders each as a
/// section of its own.
pub const EXAMPLES: &str = "\
  mpiexec -n 4 mpicr run --ckpt-dir ckpt -- ./sim input.dat
  srun --mpi=pmi2 -n 4 mpicr run --ckpt-dir ckpt -- ./sim input.dat
  srun --mpi=pmix -n 4 mpicr run --ckpt-dir ckpt -- ./osim    # linked to Open MPI
  mpicr checkpoint ckpt            # from another shell: checkpoint, the job continues
  mpicr checkpoint --stop ckpt     # checkpoint, then end the job (exit status 0)
  mpiexec -n 4 mpicr restart ckpt  # resume from the latest complete epoch
  mpicr status ckpt

The checkpoint directory defaults to $MPICR_CKPT_DIR, else ./mpicr-ckpt.";

pub const SIGNALS: &str = "\
Signals to a keeper: SIGUSR1 takes a checkpoint (the job continues), SIGUSR2 takes one and
ends the job; SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to the program.";

pub const ENVIRONMENT: &str = "\
  MPICR_CKPT_DIR    default checkpoint directory
  MPICR_SHIM        path of libmpicr.so (default: next to the mpicr binary, else in
                    ../lib of an install prefix); `none`: no preload, the program carries
                    the agent itself. Open MPI programs get libmpicr_ompi.so, standard-ABI
                    programs libmpicr_abi.so, from the same directory. A program linked to
                    libmpicr.so (mpicrcc) gets no preload
  MPICR_FACE        `mpich`, `ompi` or `abi`: the ABI the program speaks (default: from the
                    MPI library it is linked to; libmpi.so.40 is Open MPI's, libmpi_abi.so.1
                    the MPI-5 standard ABI; both run on an MPICH-ABI library underneath)
  MPICR_CRIU        path of the criu binary (default: PREFIX/libexec/mpicr/criu of the
                    install prefix, else .deps/criu/criu of the source tree the binary was
                    built in, else criu on PATH)
  MPICR_LOG         diagnostics on stderr (tracing filter directives), e.g. `debug`,
                    `pmi=trace` (every relayed PMI message), `keeper=debug,coordinator=debug`
  MPICR_DEBUG_PMI   1: same as MPICR_LOG=pmi=trace
  MPICR_PIDNS       0: run the program without a PID namespace of its own (a restart then
                    needs its old process ids free on the node)
  MPICR_COORD_BIND  address the coordinator listens on (default: 127.0.0.1 when every
                    rank runs on this host, else this host's address)";

pub const EXIT_STATUS: &str = "\
run, restart: the program's status (a program killed by a signal makes the keeper die by
  the same signal); 125 when mpicr itself fails, 126 when the program cannot be executed,
  127 when it is not found. A job ended by `checkpoint --stop` exits with 0.
checkpoint: 0 committed (with --no-wait: begun, or queued); 3 no job runs on DIR (or
  it ended while asked); 4 the checkpoint was refused or failed (the job goes on, the previous epoch stays);
  5 no answer within --timeout (or, with --stop --wait, the job did not end within it).
status, list, prune, completions: 0 on success, 1 on error.
Every command: 2 on a usage error.";

/// Exit codes of `mpicr checkpoint` (and of any command for a usage error: clap's 2).
pub mod exit {
    pub const NO_JOB: i32 = 3;
    pub const CKPT_FAILED: i32 = 4;
    pub const TIMED_OUT: i32 = 5;
}

/// An error with its own exit code (see `EXIT_STATUS`).
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct Failure {
    pub code: i32,
    pub msg: String,
}

impl Failure {
    /// A `Failure` as the `anyhow::Error` every caller returns.
    #[expect(clippy::new_ret_no_self, reason = "callers return the error, never the bare Failure")]
    pub fn new(code: i32, msg: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Failure { code, msg: msg.into() })
    }
}

fn after_help() -> String {
    format!("Typical session:\n{EXAMPLES}\n\n{SIGNALS}\n\nEnvironment:\n{ENVIRONMENT}\n\nExit status: {EXIT_STATUS}")
}

#[derive(Debug, Parser)]
#[command(
    name = "mpicr",
    version,
    about = "Transparent checkpoint/restart for unmodified MPI programs",
    long_about = "Transparent checkpoint/restart for unmodified MPI programs.\n\n\
        Every rank runs under a keeper (`mpicr run` or `mpicr restart`, started by the MPI \
        launcher) that relays the program's PMI traffic, its standard output and error, and \
        drives CRIU. The rank-0 keeper hosts the job's coordinator; `mpicr checkpoint` asks it \
        for a checkpoint.",
    after_help = after_help()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run PROGRAM as one rank under a keeper (start it with the MPI launcher: `mpiexec -n N mpicr run -- PROGRAM`)
    Run(RunArgs),
    /// Checkpoint a running job (it continues, or ends with --stop)
    Checkpoint(CheckpointArgs),
    /// Restore one rank of a checkpointed job (start it with the launcher: `mpiexec -n N mpicr restart DIR`)
    Restart(RestartArgs),
    /// Show the job and the epochs of a checkpoint directory
    Status(StatusArgs),
    /// List this user's running jobs that have a keeper on this node
    List(ListArgs),
    /// Remove old epochs, keeping the newest N complete ones (never the latest complete one)
    Prune(PruneArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell)
    Completions(CompletionsArgs),
    /// Write the man pages and the shell completions (for `make install`)
    #[command(hide = true)]
    GenDocs(GenDocsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct GenDocsArgs {
    /// Write mpicr.1 and one page per subcommand (mpicr-run.1, ...) into DIR
    #[arg(long, value_name = "DIR")]
    pub man: Option<PathBuf>,
    /// Write bash/mpicr, zsh/_mpicr and fish/mpicr.fish under DIR
    #[arg(long, value_name = "DIR")]
    pub completions: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DirArg {
    /// Checkpoint directory [default: $MPICR_CKPT_DIR, else ./mpicr-ckpt]
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

impl DirArg {
    pub fn resolve(&self) -> PathBuf {
        resolve_dir(self.dir.clone())
    }
}

pub fn resolve_dir(dir: Option<PathBuf>) -> PathBuf {
    dir.or_else(|| std::env::var_os(CKPT_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)).unwrap_or_else(|| PathBuf::from(DEFAULT_CKPT_DIR))
}

/// `mpicr run --mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RankMode {
    Criu,
    App,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Checkpoint directory [default: $MPICR_CKPT_DIR, else ./mpicr-ckpt]
    #[arg(long, value_name = "DIR")]
    pub ckpt_dir: Option<PathBuf>,

    /// Take a checkpoint every DURATION (e.g. 90s, 10m, 1h30m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub interval: Option<Duration>,

    /// When the checkpoint directory holds a complete epoch, restart from the latest one
    /// instead of starting PROGRAM (`mpicr restart`); when its job already ran to its end, exit
    /// with its status. For batch scripts that are requeued or resubmitted as they are
    #[arg(long)]
    pub resume_if_any: bool,

    /// Checkpoint and stop the job DURATION before its time limit: Slurm's (squeue's time left
    /// of $SLURM_JOB_ID), or $MPICR_END_TIME (unix seconds)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stop_before: Option<Duration>,

    /// How this rank is checkpointed: `criu` (transparent: CRIU images of the whole process) or
    /// `app` (the program saves and restores its own data at `mpicr_safe_point()`, see
    /// include/mpicr.h; a restart starts it afresh; no CRIU). Ranks of one job may differ (MPMD)
    #[arg(long, value_enum, default_value_t = RankMode::Criu)]
    pub mode: RankMode,

    /// Print what the keeper does on stderr
    #[arg(short, long)]
    pub verbose: bool,

    #[command(flatten)]
    pub store: StoreArgs,

    /// Start the program without LD_PRELOAD of libmpicr.so (no checkpoints of MPI state)
    #[arg(long, help_heading = "Debugging")]
    pub no_shim: bool,

    /// The program is no MPI program: no shim, no PMI; checkpoints are plain CRIU dumps
    #[arg(long, help_heading = "Debugging")]
    pub no_mpi: bool,

    /// The program and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    pub program: Vec<OsString>,
}

#[derive(Debug, Args)]
#[command(after_help = "Without --no-wait the command returns once the epoch is committed: written, \
    checksummed and signed, the `latest` link updated (the default; --wait says so). With --stop \
    --wait it also waits until the job has ended (its coordinator is gone), so that a script can \
    restart or requeue it at once. --no-wait returns as soon as the coordinator has begun the \
    checkpoint (printing its epoch) or queued it until every rank's program has initialised MPI; \
    `mpicr status` shows how it went.")]
pub struct CheckpointArgs {
    /// Checkpoint, then end the job (the job exits with status 0)
    #[arg(long)]
    pub stop: bool,

    /// Return once the epoch is committed (the default); with --stop, once the job has ended
    #[arg(long, conflicts_with = "no_wait")]
    pub wait: bool,

    /// Return as soon as the checkpoint has begun (or is queued)
    #[arg(long)]
    pub no_wait: bool,

    /// Give up when the checkpoint is not committed within DURATION (with --stop --wait: when
    /// the job has not ended within it)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    pub timeout: Duration,

    #[command(flatten)]
    pub dir: DirArg,
}

#[derive(Debug, Args)]
pub struct RestartArgs {
    #[command(flatten)]
    pub dir: DirArg,

    /// Restore this epoch instead of the latest complete one
    #[arg(long, value_name = "K")]
    pub epoch: Option<u64>,

    /// Take a checkpoint every DURATION after the restart (e.g. 10m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub interval: Option<Duration>,

    /// Checkpoint and stop the job DURATION before its time limit (see `mpicr run`)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stop_before: Option<Duration>,

    /// Restart on this MPI library (same ABI) instead of the one checkpointed on; later
    /// renewals keep it. Default: $MPICR_MPI_LIB, else the checkpointed one
    #[arg(long, value_name = "PATH")]
    pub mpi_lib: Option<PathBuf>,

    /// Restore with CRIU lazy pages: the program runs again before its memory is all in; a
    /// `criu lazy-pages` daemon per rank serves the rest through userfaultfd. Also
    /// MPICR_LAZY_PAGES=1. Where userfaultfd is not available, one line says so and every page
    /// is restored up front
    #[arg(long)]
    pub lazy_pages: bool,

    /// Print what the keeper does on stderr
    #[arg(short, long)]
    pub verbose: bool,

    #[command(flatten)]
    pub store: StoreArgs,
}

impl RestartArgs {
    /// `--lazy-pages`, or `MPICR_LAZY_PAGES=1`.
    pub fn lazy(&self) -> bool {
        self.lazy_pages || std::env::var("MPICR_LAZY_PAGES").is_ok_and(|v| v == "1")
    }
}

/// How checkpoints are written and kept (`run` and `restart`; a restart does not inherit them).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Checkpoint storage")]
pub struct StoreArgs {
    /// Incremental checkpoints: CRIU tracks the program's memory (--track-mem) and each dump
    /// writes only the pages dirtied since this process's previous dump, whose epoch it links
    /// to (a restart follows the chain; retention keeps it). Needs the kernel's soft-dirty
    /// tracking: without it, one line says so and every dump is full
    #[arg(long)]
    pub incremental: bool,

    /// Dump into DIR (fast node-local storage, e.g. /dev/shm), let the program run on, then
    /// copy the images into the checkpoint directory in the background, checksummed; the
    /// epoch is committed only once every rank's copy is
    #[arg(long, value_name = "DIR")]
    pub stage_dir: Option<PathBuf>,

    /// With --stage-dir: the memory pages reach the checkpoint directory compressed by the
    /// zstd tool (level 1; a restart expands them next to the images, then removes them)
    #[arg(long, requires = "stage_dir")]
    pub compress: bool,

    /// After each committed checkpoint, remove all but the newest N complete epochs (never
    /// the latest one, nor an epoch that a kept incremental epoch needs)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub dir: DirArg,

    /// Print the status as one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the jobs as a JSON array
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// How many complete epochs to keep, the newest (at least 1: the latest complete epoch is
    /// never removed)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: u64,

    /// Say what would be removed, remove nothing
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub dir: DirArg,
}

/// Why a duration does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {0:?}: expected a number, e.g. 90s, 10m, 1h30m")]
    NotANumber(String),
    #[error("invalid duration {0:?}: number too large")]
    NumberTooLarge(String),
    #[error("invalid duration {0:?}: unknown unit {1:?} (use ms, s, m, h or d)")]
    UnknownUnit(String, String),
    #[error("invalid duration {0:?}: too large")]
    TooLarge(String),
    #[error("invalid duration {0:?}: must be positive")]
    NotPositive(String),
}

/// Parses `90`, `90s`, `10m`, `1h30m`, `2h`, `500ms` into a positive duration.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(DurationError::NotANumber(s.into()));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| DurationError::NumberTooLarge(s.into()))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|c| c.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "" if rest.is_empty() && total.is_zero() => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            "s" | "sec" => Duration::from_secs(n),
            "m" | "min" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86400)),
            _ => return Err(DurationError::UnknownUnit(s.into(), unit.into())),
        };
        total = total.checked_add(part).ok_or_else(|| DurationError::TooLarge(s.into()))?;
    }
    if total.is_zero() {
        return Err(DurationError::NotPositive(s.into()));
    }
    Ok(total.min(MAX_TIMEOUT))
}

/// `1h30m`, `45s`, `1.25s`: a short human form of a duration.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    } else if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("1h30").is_err());
        // Huge values are capped or refused, never a panic.
        assert_eq!(parse_duration("18446744073709551615d"), Ok(MAX_TIMEOUT));
        assert!(parse_duration("18446744073709551615s18446744073709551615s").unwrap_err().to_string().contains("too large"));
        assert!(parse_duration("99999999999999999999999s").unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn formats() {
        assert_eq!(format_duration(Duration::from_millis(1250)), "1.250s");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(61)), "1m01s");
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_program_after_double_dash() {
        let cli = Cli::try_parse_from(["mpicr", "run", "--interval", "10m", "--", "./sim", "-x", "--y"]).unwrap();
        let Command::Run(r) = cli.command else { panic!() };
        assert_eq!(r.interval, Some(Duration::from_secs(600)));
        assert_eq!(r.program, vec![OsString::from("./sim"), "-x".into(), "--y".into()]);
    }

    #[test]
    fn dir_defaults() {
        assert_eq!(resolve_dir(Some("x".into())), PathBuf::from("x"));
    }
}
