//! The keeper: one per rank (`mpicr run`, `mpicr restart`), started by the MPI launcher. It owns
//! what belongs to the launcher (its PMI connection, stdio), starts or restores the program with
//! a clean descriptor table, relays PMI and output, talks to the coordinator and runs CRIU.

use crate::args::RunArgs;
use crate::coord_wire::{self, AgentInfo, CoordInfo, FromCoord, Hello, KeeperHello, Mode, SecureTx, ToCoord};
use crate::coordinator;
use crate::criu::{Criu, DumpSpec};
use crate::ctl;
use crate::images::{self, CkptDir, ExternalPipe, ExternalSocket, JobInfo, RankManifest, RankMeta};
use crate::keeper_state::{CkptState, State};
use crate::pmi_relay::{Launcher, PmiEnv, Relay};
use crate::spawn::{self, Plan, PROGRAM_CTL_FD, PROGRAM_PMI_FD};
use crate::sys::{self, Exit};
use anyhow::{anyhow, bail, Context, Result};
use mpicr_proto::{FromAgent, ToAgent};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// PMI key under which rank 0 publishes the coordinator to the other keepers.
const COORD_KEY: &str = "mpicr-coordinator";
pub(crate) const CRIU_TIMEOUT: Duration = Duration::from_secs(600);
/// The number at which a dump's CRIU inherits the program's write tracker (`incremental`).
const CRIU_UFFD_FD: i32 = 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the coordinator's host waits, after its program ended well, for ranks that have not
/// joined yet.
const JOIN_LIMIT: Duration = Duration::from_secs(10);
/// How long the rank-0 keeper, its program ended, waits for a checkpoint in progress to be
/// committed (the other ranks' images sealed) before the coordinator fails it.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// How the keeper ended: the launcher must see the program's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Exit(i32),
    Signal(i32),
}

#[derive(Debug)]
pub(crate) enum Ev {
    Agent(ctl::Frame),
    AgentClosed(Option<String>),
    Coord(FromCoord),
    CoordClosed,
    Child(Result<Exit, WaitError>),
    Signal(i32),
    /// The images of this epoch are synced and checksummed (`Keeper::sealing`).
    Sealed(u64),
}

/// Why the keeper could not learn how the program ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WaitError {
    #[error("the program (pid {0}) is not a child of the keeper")]
    NotAChild(i32),
    #[error("waiting for the program")]
    Wait(#[source] std::io::Error),
}

/// This rank's identity and launcher session.
pub(crate) struct Launch {
    pub(crate) rank: i32,
    pub(crate) size: i32,
    pub(crate) launcher: Option<Arc<Launcher>>,
    /// Under Open MPI's launcher (PMIx, no PMI): the keepers meet in the checkpoint directory.
    pub(crate) pmix: Option<crate::pmix::PmixEnv>,
}

/// Keeps the launcher connection open until the process exits, also on error paths: closing it
/// early would make the launcher kill the job before this rank's error message is forwarded.
static LAUNCHER: std::sync::OnceLock<Arc<Launcher>> = std::sync::OnceLock::new();

/// `wire`: the PMI version to initialise with the launcher, the one the program speaks.
pub(crate) fn launch(wire: crate::pmi::Wire) -> Result<Launch> {
    sys::cloexec_inherited_fds().context("marking inherited descriptors close-on-exec")?;
    match PmiEnv::from_env()? {
        Some(env) => {
            let l = Arc::new(Launcher::connect(env, wire).context("connecting to the launcher's PMI")?);
            let _ = LAUNCHER.set(Arc::clone(&l));
            Ok(Launch { rank: env.rank, size: env.size, launcher: Some(l), pmix: None })
        }
        None => match crate::pmix::PmixEnv::from_env()? {
            Some(p) => Ok(Launch { rank: p.rank, size: p.size, launcher: None, pmix: Some(p) }),
            None => Ok(Launch { rank: 0, size: 1, launcher: None, pmix: None }),
        },
    }
}

/// Rank 0 publishes the coordinator; everyone meets in a PMI barrier (under a PMIx launcher:
/// in `dir`); the others read it.
pub(crate) fn exchange_coordinator(l: &Launch, dir: &CkptDir, mine: Option<&CoordInfo>) -> Result<CoordInfo> {
    if let Some(p) = &l.pmix {
        return crate::pmix::meet(p, dir, mine);
    }
    match (&l.launcher, mine) {
        (None, Some(info)) => Ok(info.clone()),
        (None, None) => bail!("internal error: no coordinator for a rank without launcher"),
        (Some(pmi), Some(info)) => {
            pmi.put(COORD_KEY, &info.to_pmi_value())?;
            pmi.barrier()?;
            Ok(info.clone())
        }
        (Some(pmi), None) => {
            pmi.barrier()?;
            CoordInfo::from_pmi_value(&pmi.get(COORD_KEY)?)
        }
    }
}

/// Where the coordinator listens: `$MPICR_COORD_BIND`, else loopback when every rank runs on
/// this host (no launcher, or the launcher's `PMI_process_mapping` names one node), else the
/// address of this host's name (what the other keepers connect to), else every interface.
pub(crate) fn coordinator_bind(l: &Launch) -> String {
    if let Some(b) = std::env::var("MPICR_COORD_BIND").ok().filter(|b| !b.is_empty()) {
        return b;
    }
    let one_node = match &l.launcher {
        None => l.pmix.as_ref().is_none_or(|p| p.one_node),
        Some(pmi) => pmi.get("PMI_process_mapping").ok().and_then(|m| nodes_in_mapping(&m)) == Some(1),
    };
    if one_node {
        return "127.0.0.1".into();
    }
    use std::net::ToSocketAddrs;
    let host = sys::hostname();
    let addrs = (host.as_str(), 0).to_socket_addrs().map(|a| a.collect::<Vec<_>>()).unwrap_or_default();
    match addrs.iter().find(|a| !a.ip().is_loopback() && !a.ip().is_unspecified()) {
        Some(a) => a.ip().to_string(),
        None => "0.0.0.0".into(),
    }
}

/// Number of nodes in an MPICH `PMI_process_mapping` value, e.g. `(vector,(0,2,4))`: blocks of
/// `(first node, node count, ranks per node)`.
pub(crate) fn nodes_in_mapping(m: &str) -> Option<u64> {
    let inner = m.trim().strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut nodes = 0u64;
    for block in inner.split("),").map(|b| b.trim_start_matches('(').trim_end_matches(')')) {
        let nums: Vec<u64> = block.split(',').map(|n| n.trim().parse().ok()).collect::<Option<_>>()?;
        let [first, count, _per_node] = nums[..] else { return None };
        nodes = nodes.max(first.checked_add(count)?);
    }
    (nodes > 0).then_some(nodes)
}

pub(crate) fn new_secret() -> Result<Vec<u8>> {
    let mut s = vec![0u8; coord_wire::SECRET_LEN];
    sys::random_bytes(&mut s)?;
    Ok(s)
}

fn new_job_id() -> Result<String> {
    let mut b = [0u8; 8];
    sys::random_bytes(&mut b)?;
    Ok(images::hex(&b))
}

/// Errors when `dir` belongs to a job that is still running on this host.
pub(crate) fn check_not_running(dir: &CkptDir) -> Result<()> {
    let Ok(info) = images::read_json::<CoordInfo>(&dir.coordinator_path()) else { return Ok(()) };
    if info.host != sys::hostname() || info.pid == std::process::id() {
        return Ok(());
    }
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", info.pid)).unwrap_or_default();
    if comm.trim() == "mpicr" {
        bail!(
            "job {} is still running on {} (its coordinator is pid {}); stop it first (mpicr checkpoint --stop {})",
            info.job_id,
            dir.root.display(),
            info.pid,
            dir.root.display()
        );
    }
    Ok(())
}

/// The program's pid once it runs (0 before): where terminating signals go.
pub(crate) static PROGRAM_PID: AtomicI32 = AtomicI32::new(0);

/// SIGUSR1/SIGUSR2 become checkpoint requests; SIGTERM, SIGINT, SIGHUP and SIGQUIT go to the
/// program, or end the keeper the same way while there is no program yet.
pub(crate) fn start_signal_thread(tx: Sender<Ev>) -> Result<()> {
    use signal_hook::consts::*;
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGQUIT]).context("installing signal handlers")?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for sig in signals.forever() {
            if sig == SIGUSR1 || sig == SIGUSR2 {
                let _ = tx.send(Ev::Signal(sig));
                continue;
            }
            match PROGRAM_PID.load(Ordering::SeqCst) {
                0 => sys::die_by_signal(sig),
                pid => {
                    let _ = sys::kill(pid, sig);
                }
            }
        }
    })?;
    Ok(())
}

pub(crate) fn start_ctl_reader(sock: UnixStream, tx: Sender<Ev>) -> Result<()> {
    std::thread::Builder::new().name("ctl-reader".into()).spawn(move || loop {
        match ctl::next(&sock) {
            Ok(Some(frame)) => {
                if tx.send(Ev::Agent(frame)).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(Ev::AgentClosed(None));
                return;
            }
            Err(e) => {
                let _ = tx.send(Ev::AgentClosed(Some(e.to_string())));
                return;
            }
        }
    })?;
    Ok(())
}

/// Waits for the program (or the init of its PID namespace, which then wrote the program's own
/// status into `status`).
pub(crate) fn start_waiter(pid: i32, status: Option<OwnedFd>, tx: Sender<Ev>) -> Result<()> {
    std::thread::Builder::new().name("waiter".into()).spawn(move || {
        let r = match sys::wait_pid(pid) {
            Ok(Some(exit)) => Ok(status.as_ref().and_then(|fd| crate::pidns::read_status(fd.as_fd())).unwrap_or(exit)),
            Ok(None) => Err(WaitError::NotAChild(pid)),
            Err(e) => Err(WaitError::Wait(e)),
        };
        let _ = tx.send(Ev::Child(r));
    })?;
    Ok(())
}

/// Connects to the coordinator, says who we are and waits for the welcome.
pub(crate) fn join_coordinator(info: &CoordInfo, hello: KeeperHello, tx: Sender<Ev>) -> Result<SecureTx> {
    let (mut s, mut reader) = coord_wire::connect(info, CONNECT_TIMEOUT)?;
    coord_wire::send(&mut s, &Hello::Keeper(hello))?;
    reader.stream().set_read_timeout(Some(CONNECT_TIMEOUT))?;
    match coord_wire::recv::<FromCoord>(&mut reader).context("waiting for the coordinator's welcome")? {
        Some(FromCoord::Welcome { .. }) => {}
        Some(FromCoord::Refused { reason }) => bail!("the coordinator refused this rank: {reason}"),
        other => bail!("unexpected first message from the coordinator: {other:?}"),
    }
    reader.stream().set_read_timeout(None)?;
    s.stream().set_write_timeout(Some(Duration::from_secs(10)))?;
    std::thread::Builder::new().name("coord-reader".into()).spawn(move || loop {
        match coord_wire::recv::<FromCoord>(&mut reader) {
            Ok(Some(m)) => {
                if tx.send(Ev::Coord(m)).is_err() {
                    return;
                }
            }
            _ => {
                let _ = tx.send(Ev::CoordClosed);
                return;
            }
        }
    })?;
    Ok(s)
}

/// The descriptor number for PMI in the program: high, unless the descriptor limit is low.
pub(crate) fn pmi_fd_number() -> RawFd {
    if sys::nofile_limit() > PROGRAM_PMI_FD as u64 + 1 {
        PROGRAM_PMI_FD
    } else {
        4
    }
}

/// `DIR/ENDED`: the job ran to its end (not stopped by a checkpoint), with this status; written
/// by the rank-0 keeper. `run --resume-if-any` then has nothing to resume.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ended {
    pub(crate) job_id: String,
    /// `Exit`'s text (`exit status 0`, `killed by signal 9`).
    pub(crate) status: String,
    pub(crate) code: Option<i32>,
    pub(crate) unix: u64,
}

pub(crate) fn ended_path(dir: &CkptDir) -> PathBuf {
    dir.root.join("ENDED")
}

/// `run --resume-if-any`: `Some` when the directory holds a job to resume (a restart) or one
/// that already ran to its end (its status); `None`: start the program.
fn resume_if_any(args: &RunArgs) -> Result<Option<Outcome>> {
    let dir = CkptDir::new(crate::args::resolve_dir(args.ckpt_dir.clone()));
    if !dir.job_path().exists() {
        return Ok(None);
    }
    let job = dir.read_job()?;
    if let Ok(e) = images::read_json::<Ended>(&ended_path(&dir)) {
        if e.job_id == job.job_id {
            crate::elog!("mpicr: job {} in {} already ran to its end ({}): nothing to resume", e.job_id, dir.root.display(), e.status);
            return Ok(Some(Outcome::Exit(e.code.unwrap_or(1))));
        }
    }
    if !dir.epochs()?.iter().any(|e| matches!(e.state, images::EpochState::Complete(_))) {
        return Ok(None);
    }
    let a = crate::args::RestartArgs {
        dir: crate::args::DirArg { dir: Some(dir.root.clone()) },
        epoch: None,
        interval: args.interval,
        stop_before: args.stop_before,
        mpi_lib: None,
        lazy_pages: false,
        verbose: args.verbose,
        store: args.store.clone(),
    };
    crate::restart::restart(a).map(Some)
}

/// `mpicr run`.
pub fn run(args: RunArgs) -> Result<Outcome> {
    if args.resume_if_any {
        if let Some(out) = resume_if_any(&args)? {
            return Ok(out);
        }
    }
    let mode = if args.no_mpi {
        Mode::NoMpi
    } else if args.no_shim {
        Mode::NoShim
    } else {
        Mode::Agent
    };
    let app = args.mode == crate::args::RankMode::App;
    let dir = CkptDir::new(crate::args::resolve_dir(args.ckpt_dir.clone()));
    // PMI first: once this rank is known to the launcher, any error exit below (no finalize)
    // makes the launcher end the whole job instead of leaving the others in a barrier.
    let (tx, rx) = mpsc::channel();
    start_signal_thread(tx.clone())?;
    let l = launch(crate::pmi_relay::program_wire())?;
    if app && mode != Mode::Agent {
        bail!("--mode app needs the shim and MPI (not --no-shim or --no-mpi)");
    }
    // A non-root user's CRIU must be able to checkpoint before the job runs for hours (app-mode
    // ranks never use CRIU).
    if !app {
        crate::criu::preflight()?;
    }
    let criu_bin = if app || mode == Mode::NoShim { None } else { crate::criu::Criu::locate().ok().map(|c| c.bin) };
    let program = spawn::resolve_program(&args.program[0]).map_err(anyhow::Error::new)?;
    let app_launch = if app { Some(crate::app::AppLaunch::capture(&program, &args.program)?) } else { None };
    // The face library for the program's ABI (MPICH's, or Open MPI's over an MPICH library).
    // A program linked to its face (`mpicrcc`, `-lmpicr`) carries it: nothing to preload.
    let linked = if mode == Mode::Agent { crate::paths::linked_face(&program) } else { None };
    let shim = match (&mode, &linked) {
        (Mode::Agent, None) => crate::paths::shim(crate::mpilib::program_face(&program)?)?,
        _ => None,
    };
    if let (true, Some(lib)) = (args.verbose, &linked) {
        crate::elog!("mpicr[{}]: the program is linked to {lib}: no preload", l.rank);
    }
    // A library chosen by hand (`MPICR_MPI_LIB`, which the shim loads) passes the checks of a
    // restart on another library before the job starts.
    if mode == Mode::Agent {
        if let Some((lib, from)) = crate::mpilib::requested(None) {
            let abs = crate::mpilib::check(&lib, from, false, &program, None)?;
            // Open MPI underneath talks PMIx to its own launcher; a PMI launcher cannot serve it.
            if l.launcher.is_some() && crate::pmix::is_open_mpi(&abs) {
                bail!(
                    "{from} {}: it is Open MPI's ABI, which mpicr runs underneath only under a PMIx launcher (Open MPI's mpirun, prterun --personality ompi, srun --mpi=pmix); this launcher speaks PMI",
                    lib.display()
                );
            }
        }
    }
    let ompi_lib = match (&mode, &l.pmix) {
        (Mode::Agent, Some(p)) => open_mpi_underneath(&program, p)?,
        _ => None,
    };

    let mine = if l.rank == 0 {
        dir.secure(true)?;
        check_not_running(&dir)?;
        if dir.job_path().exists() && !dir.epochs()?.is_empty() {
            let old = dir.read_job().map(|j| j.job_id).unwrap_or_else(|_| "?".into());
            bail!(
                "{} already holds checkpoints of job {old}; restart it (mpicr restart), or choose another --ckpt-dir, or remove the directory",
                dir.root.display()
            );
        }
        let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
        let job = JobInfo {
            format: images::FORMAT,
            job_id: new_job_id()?,
            ranks: l.size,
            program: program.display().to_string(),
            argv: args.program.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            cwd,
            created_unix: images::now_unix(),
            mode: mode_name(&mode).into(),
            kvsname: l.launcher.as_ref().map(|p| p.kvsname.clone()),
            pmi_version: l.launcher.as_ref().map(|p| crate::pmi_relay::wire_version(p.wire)),
            mpi_library: None,
            renew_strategy: None,
            mpicr_version: env!("CARGO_PKG_VERSION").into(),
        };
        dir.write_job(&job)?;
        let key = dir.new_key()?;
        let stop_at = args.stop_before.map(crate::slurm::stop_at).transpose()?;
        let cfg = coordinator::Config {
            dir: dir.clone(),
            job,
            interval: args.interval,
            restart_epoch: None,
            verbose: args.verbose,
            key,
            bind: coordinator_bind(&l),
            stop_at,
            keep: args.store.keep,
        };
        let info = coordinator::start(cfg, new_secret()?)?;
        info.write(&dir)?;
        Some(info)
    } else {
        None
    };
    let info = exchange_coordinator(&l, &dir, mine.as_ref())?;
    if l.rank != 0 {
        dir.secure(true)?;
    }
    let presented_kvsname = l.launcher.as_ref().map(|p| p.kvsname.clone()).unwrap_or_default();

    // Sockets and the program.
    let (k_ctl, p_ctl) = sys::socketpair().context("creating the control socketpair")?;
    let mut keeper_socks = HashMap::new();
    keeper_socks.insert(sys::inode(k_ctl.as_fd())?, "ctl".to_string());
    let mut fds: Vec<(OwnedFd, RawFd)> = vec![(p_ctl, PROGRAM_CTL_FD)];
    let mut set_env: Vec<(String, OsString)> = vec![(mpicr_proto::CTL_FD_ENV.into(), PROGRAM_CTL_FD.to_string().into())];
    let tracker = crate::incremental::Tracker::new(args.store.incremental, criu_bin.as_deref(), l.rank);
    if tracker.write.is_some() {
        // The agent then hands over a write tracker (`incremental`).
        set_env.push((mpicr_proto::WRITE_TRACK_ENV.into(), "1".into()));
    }
    let mut remove_env: Vec<String> = vec!["HYDI_CONTROL_FD".into(), "PMI_PORT".into()];
    let relay = match (&l.launcher, &mode) {
        (Some(pmi), Mode::Agent | Mode::NoShim) => Some(Relay::new(Arc::clone(pmi), presented_kvsname, 0)),
        _ => None,
    };
    let mut first_pmi = None;
    if relay.is_some() {
        let (k_pmi, p_pmi) = sys::socketpair().context("creating the PMI socketpair")?;
        keeper_socks.insert(sys::inode(k_pmi.as_fd())?, "pmi".to_string());
        let n = pmi_fd_number();
        fds.push((p_pmi, n));
        set_env.push(("PMI_FD".into(), n.to_string().into()));
        first_pmi = Some(k_pmi);
    } else {
        remove_env.push("PMI_FD".into());
    }
    if let Some(shim) = &shim {
        let mut v = shim.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            v.push(":");
            v.push(old);
        }
        set_env.push(("LD_PRELOAD".into(), v));
    }
    if app {
        set_env.push((crate::app::APP_MODE_ENV.into(), "1".into()));
    }
    if let Some(lib) = &ompi_lib {
        set_env.push((crate::mpilib::MPI_LIB_ENV.into(), lib.as_os_str().to_owned()));
    }
    // App-mode ranks, never dumped, get a namespace all the same: UCX wires two ranks up
    // differently when one is in a namespace and the other not, and aborts ("endpoint
    // reconfiguration not supported yet", seen in MPI_Win_create between an app-mode rank and a
    // CRIU one).
    let pidns = crate::pidns::wanted() && crate::pidns::available();
    if args.verbose && !pidns && !app {
        crate::elog!("mpicr[{}]: the program runs without a PID namespace of its own (a restart needs its process ids free)", l.rank);
    }
    let mut lower_env = Vec::new();
    if pidns {
        let (set, managed) = crate::pidns::settings_at_run(crate::pidns::all_ranks_local());
        set_env.extend(set);
        lower_env = managed;
    }
    let init_dir = if pidns {
        let d = dir.init_dir(l.rank);
        images::private_dir_all(&d)?;
        Some(d)
    } else {
        None
    };
    let spawned =
        spawn::spawn(Plan { program: program.clone(), argv: args.program.clone(), set_env, remove_env, fds, pidns: init_dir.clone(), cwd: None, no_aslr: app })
            .map_err(anyhow::Error::new)?;
    let pid = spawned.pid;
    PROGRAM_PID.store(pid, Ordering::SeqCst);
    let guard = ProgramGuard(pid);
    let stdout_ino = sys::inode(spawned.stdout.as_fd())?;
    let stderr_ino = sys::inode(spawned.stderr.as_fd())?;
    let status_ino = spawned.status.as_ref().map(|fd| sys::inode(fd.as_fd())).transpose()?.unwrap_or(0);
    let relays = vec![spawn::relay_output(spawned.stdout, 1, "stdout")?, spawn::relay_output(spawned.stderr, 2, "stderr")?];
    start_waiter(pid, spawned.status, tx.clone())?;
    let k_ctl = UnixStream::from(k_ctl);
    start_ctl_reader(k_ctl.try_clone()?, tx.clone())?;
    if let (Some(relay), Some(k)) = (&relay, first_pmi) {
        relay.serve(UnixStream::from(k), None)?;
    }
    let hello = KeeperHello {
        rank: l.rank,
        size: l.size,
        job_id: info.job_id.clone(),
        host: sys::hostname(),
        keeper_pid: std::process::id(),
        program_pid: pid,
        mode: mode.clone(),
        restart_epoch: None,
    };
    let coord = join_coordinator(&info, hello, tx.clone())?;
    let mut k = Keeper {
        rank: l.rank,
        size: l.size,
        mode,
        dir,
        job_id: info.job_id.clone(),
        verbose: args.verbose,
        pid,
        ctl: k_ctl,
        keeper_socks,
        stdout_ino,
        stderr_ino,
        status_ino,
        init_dir,
        lower_env,
        resume_env: Vec::new(),
        launcher: l.launcher.clone(),
        relay,
        coord: Some(coord),
        agent: None,
        state: State::Running,
        relays,
        coord_info: mine,
        early_dump: None,
        ahead_off: false,
        app: app_launch,
        store: crate::stage::Store::new(tx.clone(), &args.store, &info.job_id, l.rank, tracker)?,
    };
    let out = k.event_loop(rx);
    if out.is_ok() {
        guard.disarm();
    }
    out
}

/// Under a PMIx launcher (Open MPI's, or `srun --mpi=pmix`) only Open MPI can run underneath:
/// for a program linked to Open MPI, the launcher's library unless `MPICR_MPI_LIB` names one; any
/// other program needs `MPICR_MPI_LIB` to name it. `Some`: the library to hand the program.
pub(crate) fn open_mpi_underneath(program: &std::path::Path, p: &crate::pmix::PmixEnv) -> Result<Option<PathBuf>> {
    use crate::mpilib::{self, Face};
    let launcher = p.launcher_name();
    if let Some((lib, from)) = mpilib::requested(None) {
        if !crate::pmix::is_open_mpi(&lib) {
            bail!("{from} {}: under {launcher} (PMIx) the library underneath must be Open MPI's libmpi.so.40", lib.display());
        }
        return Ok(None);
    }
    // A PMI launcher serves every other library: under Slurm, its pmi2 plugin.
    let instead = if p.slurm { "launch it with srun --mpi=pmi2, or set" } else { "set" };
    match mpilib::program_face(program)? {
        Face::OpenMpi => match crate::pmix::program_library(program) {
            Some(lib) => {
                mpilib::check(&lib, "the program's", false, program, None)?;
                Ok(Some(lib))
            }
            None => bail!(
                "under {launcher}: the libmpi.so.40 {} is linked to was not found (LD_LIBRARY_PATH, its RUNPATH, OMPI_LIBDIR_LOC); set {} to the Open MPI library to run on",
                program.display(),
                mpilib::MPI_LIB_ENV
            ),
        },
        f => bail!(
            "{} speaks {}, but {launcher} serves PMIx, which only Open MPI underneath can talk to: {instead} {} to Open MPI's libmpi.so.40",
            program.display(),
            f.name(),
            mpilib::MPI_LIB_ENV
        ),
    }
}

fn mode_name(m: &Mode) -> &'static str {
    match m {
        Mode::Agent => "mpi",
        Mode::NoShim => "no-shim",
        Mode::NoMpi => "no-mpi",
    }
}

/// Kills the program's process group if the keeper bails out on an error.
pub(crate) struct ProgramGuard(pub(crate) i32);

impl ProgramGuard {
    pub(crate) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        kill_program(self.0);
    }
}

/// Continues a program that CRIU left stopped (`--leave-stopped`): its whole process group (the
/// init of its PID namespace and the program), and the program through the init.
pub(crate) fn resume_stopped(pid: i32) {
    let _ = sys::kill(-pid, libc::SIGCONT);
    let _ = sys::kill(pid, libc::SIGCONT);
}

pub(crate) fn kill_program(pid: i32) {
    let _ = sys::kill(-pid, libc::SIGKILL);
    let _ = sys::kill(pid, libc::SIGKILL);
}

pub(crate) struct Keeper {
    pub(crate) rank: i32,
    pub(crate) size: i32,
    pub(crate) mode: Mode,
    pub(crate) dir: CkptDir,
    pub(crate) job_id: String,
    pub(crate) verbose: bool,
    pub(crate) pid: i32,
    pub(crate) ctl: UnixStream,
    /// Inodes of the keeper's ends of sockets shared with the program, and their roles.
    pub(crate) keeper_socks: HashMap<u64, String>,
    pub(crate) stdout_ino: u64,
    pub(crate) stderr_ino: u64,
    /// The status pipe of the init (0 without a PID namespace).
    pub(crate) status_ino: u64,
    /// Where the init of the program's PID namespace works, when `pid` is that init (the
    /// directory it was started in, which a restart from a moved checkpoint directory keeps).
    pub(crate) init_dir: Option<PathBuf>,
    /// The MPI library settings mpicr decides for this program (see `pidns::settings_at_run`).
    pub(crate) lower_env: Vec<String>,
    /// What a restarted agent applies before it renews the library (`ToAgent::Resume`).
    pub(crate) resume_env: Vec<(String, Option<String>)>,
    pub(crate) launcher: Option<Arc<Launcher>>,
    pub(crate) relay: Option<Arc<Relay>>,
    pub(crate) coord: Option<SecureTx>,
    pub(crate) agent: Option<mpicr_proto::Hello>,
    /// Where this keeper stands (see `keeper_state`).
    pub(crate) state: State,
    pub(crate) relays: Vec<std::thread::JoinHandle<()>>,
    /// Set on rank 0: the coordinator it hosts.
    pub(crate) coord_info: Option<CoordInfo>,
    /// The CRIU of the next dump, started ahead of it (`start_dump_ahead`).
    pub(crate) early_dump: Option<EarlyDump>,
    /// No dump is started ahead until the next checkpoint begins (the last try failed).
    pub(crate) ahead_off: bool,
    /// An app-mode rank: how its program was started (never dumped by CRIU).
    pub(crate) app: Option<crate::app::AppLaunch>,
    /// Where dumps go (`--stage-dir`), incremental dumps (`--incremental`), and the images being
    /// sealed off the event loop (`Ev::Sealed` says when).
    pub(crate) store: crate::stage::Store,
}

/// Whether dumps start ahead (`Keeper::start_dump_ahead`): unless `MPICR_DUMP_AHEAD=0`. A CRIU
/// waiting at its gate holds ~2 MiB of memory of its own (and its script ~1 MiB) per rank.
fn dump_ahead_wanted() -> bool {
    std::env::var_os("MPICR_DUMP_AHEAD").is_none_or(|v| v != "0")
}

/// A dump started ahead (`Keeper::start_dump_ahead`) into `dir`, from where its images move
/// into the epoch's directory once it is done.
/// Dropped, it is called off (CRIU ends without touching the program) and its directory goes.
pub(crate) struct EarlyDump {
    dir: PathBuf,
    /// `None` once it was let go.
    pending: Option<crate::criu::PendingDump>,
}

impl EarlyDump {
    /// Whether it does the dump `now` describes, and still waits to.
    fn fits(&self, now: &DumpSpec) -> bool {
        self.pending.as_ref().is_some_and(|p| p.spec().same_start(now) && !p.ended())
    }

    /// Lets it dump, and moves its images (after a failure, its log) into `to`.
    fn go(mut self, to: &Path) -> Result<()> {
        let done = self.pending.take().context("internal error: a dump started ahead went twice")?.go(&to.join("dump.log"));
        let moved = images::move_entries(&self.dir, to);
        done.and(moved)
    }
}

impl Drop for EarlyDump {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.cancel();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // The parent, once no rank of this node uses it.
        let _ = self.dir.parent().map(std::fs::remove_dir);
    }
}

/// What `Keeper::plan_dump` found: CRIU's start, and what the epoch records of it.
struct DumpPlan {
    spec: DumpSpec,
    fds: Vec<(OwnedFd, RawFd)>,
    sockets: BTreeMap<u64, ExternalSocket>,
    pipes: BTreeMap<u64, ExternalPipe>,
    parent: Option<u64>,
}

impl Keeper {
    fn say(&self, msg: &str) {
        if self.verbose {
            crate::elog!("mpicr[{}]: {msg}", self.rank);
        }
    }

    fn tell_coord(&mut self, m: ToCoord) {
        tracing::debug!(target: "keeper", "mpicr[{}]: -> coordinator {m:?}", self.rank);
        if let Some(c) = self.coord.as_mut() {
            if coord_wire::send(c, &m).is_err() {
                self.coord = None;
            }
        }
    }

    fn tell_agent(&mut self, m: ToAgent) -> Result<()> {
        tracing::debug!(target: "keeper", "mpicr[{}]: -> agent {m:?}", self.rank);
        ctl::send(&self.ctl, &m).with_context(|| format!("sending {} to the agent", variant(&format!("{m:?}"))))
    }

    fn fail_ckpt(&mut self, epoch: u64, reason: String) {
        self.say(&format!("checkpoint {epoch} failed here: {reason}"));
        self.tell_coord(ToCoord::Failed { epoch, reason });
    }

    pub(crate) fn event_loop(&mut self, rx: Receiver<Ev>) -> Result<Outcome> {
        // A program without an agent sends nothing before its first checkpoint.
        self.maybe_dump_ahead();
        loop {
            let ev = rx.recv().map_err(|_| anyhow!("internal error: event channel closed"))?;
            tracing::debug!(target: "keeper", "mpicr[{}]: {} <- {ev:?}", self.rank, self.state.name());
            let before = self.state.name();
            match ev {
                Ev::Child(r) => {
                    let exit = r?;
                    // A dump that completed is still committed (its program ran on and ended).
                    self.seal_held(None);
                    self.sealed(true);
                    return Ok(self.finish(exit));
                }
                Ev::Sealed(epoch) => {
                    if self.store.sealing_epoch() == Some(epoch) {
                        self.sealed(true);
                    }
                }
                Ev::Signal(sig) => self.on_signal(sig),
                Ev::Agent(frame) => self.on_agent(frame)?,
                Ev::AgentClosed(err) => {
                    if let Some(e) = err {
                        self.say(&format!("control connection to the agent failed: {e}"));
                    }
                    if let Some(c) = self.state.end_ckpt() {
                        self.fail_ckpt(c.epoch, "the program closed its control connection".into());
                    }
                }
                Ev::Coord(m) => self.on_coord(m)?,
                Ev::CoordClosed => {
                    self.coord = None;
                    self.store.drop_held();
                    if let Some(c) = self.state.end_ckpt() {
                        if c.stopped {
                            resume_stopped(self.pid);
                        }
                        // The agent waits for the coordinator's next word with its gate closed:
                        // it aborts now (renewing if it released) instead of at its deadline.
                        if self.mode != Mode::NoMpi && self.agent.is_some() {
                            let reason = format!("lost the coordinator during checkpoint {}", c.epoch);
                            self.say(&reason);
                            let _ = self.tell_agent(ToAgent::Abort { reason });
                        }
                    }
                    if let Some(e) = self.state.awaiting_go() {
                        bail!("the coordinator went away before every rank had restored epoch {e}");
                    }
                    self.say("the coordinator went away; no more checkpoints for this job");
                }
            }
            self.trace_transition(before);
            self.maybe_dump_ahead();
        }
    }

    /// Idle again (after a checkpoint, or the program's start): the next dump's CRIU starts.
    /// The sockets its program shares with the keeper are settled by then.
    fn maybe_dump_ahead(&mut self) {
        if self.early_dump.is_none() && !self.ahead_off && self.idle_for_dump_ahead() {
            self.start_dump_ahead(false);
        }
    }

    /// Logs a change of state (the transitions themselves are `State`'s).
    fn trace_transition(&self, before: &'static str) {
        if self.state.name() != before {
            tracing::debug!(target: "keeper", "mpicr[{}]: state {before} -> {}", self.rank, self.state.name());
        }
    }

    fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGUSR1 | libc::SIGUSR2 => {
                let stop = sig == libc::SIGUSR2;
                self.say(&format!("{} received: requesting a checkpoint{}", sys::signal_name(sig), if stop { " and stop" } else { "" }));
                if self.coord.is_none() {
                    tracing::warn!(target: "keeper", "mpicr[{}]: cannot checkpoint: no coordinator", self.rank);
                }
                self.tell_coord(ToCoord::Request { stop });
            }
            _ => {}
        }
    }

    fn on_agent(&mut self, frame: ctl::Frame) -> Result<()> {
        let ctl::Frame { msg: m, mut fds, truncated } = frame;
        if truncated {
            tracing::warn!(target: "keeper", "mpicr[{}]: descriptors from the agent were dropped by the kernel (MSG_CTRUNC; is the keeper out of descriptors?)", self.rank);
        }
        if !fds.is_empty() && !matches!(m, FromAgent::PmiConnect { .. } | FromAgent::WriteTracker { .. }) {
            // Only PmiConnect and WriteTracker carry one; closing a stray one is all that can be done with it.
            self.say(&format!("{} descriptor(s) came with {}; closed", fds.len(), variant(&format!("{m:?}"))));
            fds.clear();
        }
        // After the agent failed, what it still sends is not part of the checkpoint.
        let epoch = self.state.ckpt().filter(|c| !c.agent_failed).map(|c| c.epoch);
        match m {
            FromAgent::Hello(h) => {
                self.say(&format!("agent ready (pid {}, {} via {})", h.pid, h.library, h.renew_strategy));
                let info = AgentInfo { library: h.library.clone(), renew_strategy: h.renew_strategy.clone(), renewals_left: h.renewals_left };
                self.agent = Some(h);
                self.tell_coord(ToCoord::AgentHello(info));
            }
            FromAgent::Request { stop } => self.tell_coord(ToCoord::Request { stop }),
            FromAgent::PmiConnect { generation } => {
                if fds.len() > 1 {
                    tracing::warn!(target: "keeper", "mpicr[{}]: PmiConnect came with {} descriptors; using the last", self.rank, fds.len());
                }
                let Some(fd) = fds.pop() else {
                    // The agent's end then has no peer: the renewed library's PMI client gets
                    // EPIPE (the agent's thread ignores SIGPIPE) and the renewal reports it.
                    tracing::warn!(target: "keeper", "mpicr[{}]: the agent sent PmiConnect for generation {generation} without a descriptor", self.rank);
                    return Ok(());
                };
                match &self.relay {
                    Some(relay) => {
                        self.keeper_socks.insert(sys::inode(fd.as_fd())?, "pmi".into());
                        relay.serve(UnixStream::from(fd), Some(generation))?;
                        self.say(&format!("PMI connection for generation {generation}"));
                    }
                    None => tracing::warn!(target: "keeper", "mpicr[{}]: the agent asked for PMI, but this keeper has no launcher", self.rank),
                }
            }
            FromAgent::WriteTracker { error } => {
                // A dump started ahead holds the tracker this one replaces.
                self.early_dump = None;
                if let Some(e) = &error {
                    tracing::warn!(target: "keeper", "mpicr[{}]: --incremental: the program's write tracker is unavailable ({e}): full dumps", self.rank);
                }
                let uffd = fds.pop();
                self.say(&format!("write tracker {}", if uffd.is_some() { "received" } else { "refused" }));
                self.store.tracker.write_tracker(uffd, error);
            }
            FromAgent::Counters { comms, groups } => match epoch {
                Some(epoch) => self.tell_coord(ToCoord::Counters { epoch, comms, groups }),
                None => self.say("agent sent Counters outside a checkpoint; ignored"),
            },
            FromAgent::SendCounts { round, sent, untold } => {
                if let Some(epoch) = epoch {
                    self.tell_coord(ToCoord::SendCounts { epoch, round, sent, untold });
                }
            }
            FromAgent::Wants { comms, groups } => {
                if let Some(epoch) = epoch {
                    self.tell_coord(ToCoord::Wants { epoch, comms, groups });
                }
            }
            FromAgent::Drained => {
                if let Some(epoch) = epoch {
                    self.tell_coord(ToCoord::Drained { epoch });
                }
            }
            FromAgent::ReadyToDump { drained_msgs, drained_bytes, state_bytes, timings } => {
                if let Some(epoch) = epoch {
                    self.tell_coord(ToCoord::ReadyToDump { epoch, drained_msgs, drained_bytes, state_bytes, timings: timings.phases_us });
                }
            }
            FromAgent::Resumed { timings } => {
                if let Some(e) = self.state.restart_resumed() {
                    self.say(&format!("program resumed after the restart from epoch {e}"));
                    self.tell_coord(ToCoord::Resumed { epoch: e, timings: timings.phases_us });
                } else if let Some(c) = self.state.end_ckpt() {
                    self.tell_coord(ToCoord::Resumed { epoch: c.epoch, timings: timings.phases_us });
                }
            }
            FromAgent::Failed { reason } => {
                if let Some(e) = self.state.restart_resumed() {
                    bail!("the program could not resume after the restart from epoch {e}: {reason}");
                }
                match self.state.ckpt_mut() {
                    Some(c) if !c.agent_failed => {
                        c.agent_failed = true;
                        let epoch = c.epoch;
                        self.fail_ckpt(epoch, reason);
                    }
                    _ => tracing::warn!(target: "keeper", "mpicr[{}]: agent reported a failure: {reason}", self.rank),
                }
            }
        }
        Ok(())
    }

    fn on_coord(&mut self, m: FromCoord) -> Result<()> {
        match m {
            FromCoord::Welcome { .. } => {}
            FromCoord::Refused { reason } => bail!("the coordinator refused this rank: {reason}"),
            FromCoord::Begin { epoch, stop } => {
                self.say(&format!("checkpoint {epoch} begins{}", if stop { " (stop)" } else { "" }));
                let rdir = match self.store.prepare(&self.dir, epoch, self.app.is_some()) {
                    Ok(t) => t.images,
                    Err(e) => {
                        self.fail_ckpt(epoch, format!("{e:#}"));
                        return Ok(());
                    }
                };
                if let Err(e) = self.state.begin(CkptState::new(epoch, stop)) {
                    self.fail_ckpt(epoch, e.to_string());
                    return Ok(());
                }
                match self.mode {
                    Mode::NoMpi => self.tell_coord(ToCoord::ReadyToDump { epoch, drained_msgs: 0, drained_bytes: 0, state_bytes: 0, timings: vec![] }),
                    _ if self.agent.is_none() => {
                        self.state.end_ckpt();
                        self.fail_ckpt(epoch, "the program has no agent".into());
                    }
                    _ => {
                        // An app-mode program may work elsewhere than the keeper (restarted in
                        // its own directory): it gets an absolute path.
                        let rdir = if self.app.is_some() { std::path::absolute(&rdir).unwrap_or(rdir) } else { rdir };
                        let state_path = rdir.join("shim.state").display().to_string();
                        if let Err(e) = self.tell_agent(ToAgent::Checkpoint { epoch, stop, state_path }) {
                            self.state.end_ckpt();
                            self.fail_ckpt(epoch, format!("{e:#}"));
                        }
                    }
                }
                // Started (or kept, when one started earlier fits) while the program gets
                // ready for its dump.
                if self.in_ckpt(epoch) {
                    self.ahead_off = false;
                    self.start_dump_ahead(stop);
                }
            }
            FromCoord::Targets { epoch, round, comms, groups } => {
                if self.in_ckpt(epoch) {
                    if let Err(e) = self.tell_agent(ToAgent::Targets { round, comms, groups }) {
                        self.fail_ckpt(epoch, format!("{e:#}"));
                    }
                }
            }
            FromCoord::Expected { epoch, expect } => {
                if self.in_ckpt(epoch) {
                    if let Err(e) = self.tell_agent(ToAgent::ExpectedRecvs { expect }) {
                        self.fail_ckpt(epoch, format!("{e:#}"));
                    }
                }
            }
            // Also after the agent failed: it may be waiting for the verdict (see `agent_failed`).
            FromCoord::Release { epoch } => {
                if self.state.ckpt().is_some_and(|c| c.epoch == epoch) && self.mode != Mode::NoMpi {
                    if let Some(r) = &self.relay {
                        r.expect_release();
                    }
                    if let Err(e) = self.tell_agent(ToAgent::Release) {
                        self.fail_ckpt(epoch, format!("{e:#}"));
                    }
                }
            }
            FromCoord::Dump { epoch } => {
                if self.in_ckpt(epoch) {
                    let t = Instant::now();
                    let stop = self.state.ckpt().is_some_and(|c| c.stop);
                    if let Some(c) = self.state.ckpt_mut() {
                        // Whatever fails after this, an abort sends SIGCONT (harmless if running).
                        c.stopped = stop;
                    }
                    match self.dump(epoch, stop) {
                        Ok(Some(info)) => self.report_dumped(epoch, Ok(info), t),
                        Ok(None) => {}
                        Err(e) => {
                            // A CRIU that failed midway may leave a process of the tree stopped
                            // (seen: the init of a PID namespace whose program was killed
                            // during the dump, so nobody reaped the program).
                            resume_stopped(self.pid);
                            self.fail_ckpt(epoch, format!("{e:#}"))
                        }
                    }
                }
            }
            FromCoord::Resume { epoch } => {
                if self.in_ckpt(epoch) && !self.state.ckpt().is_some_and(|c| c.resumed) {
                    match self.mode {
                        Mode::NoMpi => {
                            self.state.end_ckpt();
                            self.tell_coord(ToCoord::Resumed { epoch, timings: vec![] });
                        }
                        _ => {
                            if let Err(e) = self.tell_agent(ToAgent::Resume { restarted: false, epoch, size: self.size, env: Vec::new() }) {
                                self.state.end_ckpt();
                                self.fail_ckpt(epoch, format!("{e:#}"));
                            }
                        }
                    }
                }
            }
            FromCoord::Abort { epoch, reason } => {
                if self.state.awaiting_go() == Some(epoch) {
                    bail!("restart of epoch {epoch} aborted: {reason}");
                }
                if self.state.ckpt().is_some_and(|c| c.epoch == epoch) {
                    self.say(&format!("checkpoint {epoch} aborted: {reason}"));
                    self.store.drop_held();
                    if self.state.end_ckpt().is_some_and(|c| c.stopped) {
                        resume_stopped(self.pid);
                    }
                    if self.mode != Mode::NoMpi && self.agent.is_some() {
                        let _ = self.tell_agent(ToAgent::Abort { reason });
                    }
                }
            }
            FromCoord::Stop => {
                self.say("stopping the job after the checkpoint");
                self.state.stop();
                kill_program(self.pid);
            }
            FromCoord::NodeDumped { epoch } => self.seal_held(Some(epoch)),
            FromCoord::Go { epoch } => {
                if !self.state.go(epoch, self.mode == Mode::Agent) {
                    return Ok(());
                }
                match self.mode {
                    Mode::NoMpi | Mode::NoShim => self.say(&format!("every rank restored epoch {epoch}; running")),
                    Mode::Agent => {
                        let env = std::mem::take(&mut self.resume_env);
                        self.tell_agent(ToAgent::Resume { restarted: true, epoch, size: self.size, env })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Is `epoch` the checkpoint in progress here (and the agent still in it)?
    fn in_ckpt(&self, epoch: u64) -> bool {
        self.state.in_ckpt(epoch)
    }

    /// Tells the coordinator this rank's part of `epoch` is on disk (or why not).
    fn report_dumped(&mut self, epoch: u64, info: Result<RankManifest>, t: Instant) {
        match info {
            Ok(info) => {
                self.say(&format!("dumped {} in {}", images::human_bytes(info.bytes), crate::args::format_duration(t.elapsed())));
                self.tell_coord(ToCoord::Dumped { epoch, info });
            }
            Err(e) => self.fail_ckpt(epoch, format!("{e:#}")),
        }
    }

    /// Starts sealing the held dump of `epoch` (`None`: whichever is held; see
    /// `Store::seal_when_node_dumped`).
    fn seal_held(&mut self, epoch: Option<u64>) {
        let held = self.store.sealing_epoch();
        if let Err(e) = self.store.seal_held(epoch) {
            if let Some(e_held) = held {
                self.fail_ckpt(e_held, format!("{e:#}"));
            }
        }
    }

    /// The sealing thread ended (or, `wait`, is waited for): reports its epoch. Sent even when
    /// this keeper's checkpoint state already ended (the agent renewed and said `Resumed`
    /// first): the coordinator ignores the words of an epoch it no longer runs.
    fn sealed(&mut self, wait: bool) {
        let Some((epoch, info, started)) = self.store.take_sealed(wait) else { return };
        self.report_dumped(epoch, info, started);
    }

    /// Dumps the program into this rank's directory of `epoch` (the program keeps running, or
    /// stays stopped for `checkpoint --stop`). `None`: the images are being synced and
    /// checksummed in a thread of their own, which says `Ev::Sealed` when done.
    fn dump(&mut self, epoch: u64, leave_stopped: bool) -> Result<Option<RankManifest>> {
        let t = Instant::now();
        if let Some(launch) = self.app.clone() {
            let rdir = self.dir.rank_dir(epoch, self.rank);
            images::private_dir_all(&rdir)?;
            return self.app_dump(epoch, &rdir, &launch, leave_stopped, t).map(Some);
        }
        let target = self.store.target(&self.dir, epoch, false);
        images::private_dir_all(&target.images)?;
        let staged = target.images != target.fin;
        if let Some(why) = self.store.tracker.inactive_reason() {
            tracing::warn!(target: "keeper", "mpicr[{}]: {why}", self.rank);
        }
        let ahead = self.early_dump.take();
        let plan = self.plan_dump(ahead.as_ref().map_or(&target.images, |a| &a.dir), staged, leave_stopped)?;
        let tids = program_tids(self.pid);
        // A dump that fails may have cleared the bits (re-armed the tracker) already: until
        // this one succeeds, no epoch is a safe parent.
        self.store.tracker.last_dump = None;
        let DumpPlan { spec, fds, sockets, pipes, parent } = plan;
        match ahead {
            // Its images move into place (the same file system), off the program's stop.
            Some(a) if a.fits(&spec) => {
                drop(fds);
                a.go(&target.images)?;
            }
            ahead => {
                if let Some(a) = ahead {
                    tracing::debug!(target: "keeper", "mpicr[{}]: the dump started ahead does not fit this one: started again", self.rank);
                    drop(a);
                }
                Criu::dump(&DumpSpec { dir: target.images.clone(), ..spec }, fds, CRIU_TIMEOUT)?;
            }
        }
        if self.store.tracker.active() {
            // The dirty bits were cleared: only this epoch's images can be the next parent.
            self.store.tracker.last_dump = Some(epoch);
        }
        // The generation the image's program renews into at a restart: read before it runs
        // again, since its renewal right after the resume moves the relay on.
        let next_generation = self.relay.as_ref().map_or(0, |r| r.next_generation());
        // Checkpoint-and-continue: the image is complete, so the program runs again now;
        // checksums and the commit follow without stopping it. (The renewal inside is
        // collective, so it waits for the ranks still dumping.)
        if !leave_stopped && self.mode == Mode::Agent {
            self.resume_after_dump(epoch)?;
        }
        if !leave_stopped {
            self.tell_coord(ToCoord::Running { epoch });
        }
        let meta = RankMeta {
            tids,
            pidns: self.init_dir.is_some(),
            init_dir: self.init_dir.clone(),
            lower_env: self.lower_env.clone(),
            launcher_vars: crate::pmix::PmixEnv::launcher_env().into_iter().map(|(k, _)| k).collect(),
            sockets: sockets.into_values().collect(),
            pipes: pipes.into_values().collect(),
            parent_epoch: parent,
            ..self.rank_meta(epoch, next_generation)
        };
        // Synced and checksummed off the event loop: the renewal of the resumed program needs
        // this keeper (its PMI connection) while the checksums of a large image take seconds.
        self.sealed(true);
        if leave_stopped {
            self.store.seal_in_background(target, meta, t)?;
        } else {
            // Once this node's other ranks have dumped too (`FromCoord::NodeDumped`).
            self.store.seal_when_node_dumped(target, meta, t);
        }
        Ok(None)
    }

    /// Everything a CRIU dump of the program into `dir` is started with, from the program's
    /// descriptors as they are now. `staged`: the dump goes to a stage directory.
    fn plan_dump(&self, dir: &Path, staged: bool, leave_stopped: bool) -> Result<DumpPlan> {
        let peers = crate::sockdiag::unix_peers().context("listing unix socket peers (sock_diag)")?;
        let mut sockets: BTreeMap<u64, ExternalSocket> = BTreeMap::new();
        let mut pipes: BTreeMap<u64, ExternalPipe> = BTreeMap::new();
        for (fd, link) in tree_fds(self.pid)? {
            if let Some(ino) = link_inode(&link, "socket:[") {
                if let Some(role) = peers.get(&ino).and_then(|p| self.keeper_socks.get(p)) {
                    sockets.entry(ino).or_insert_with(|| ExternalSocket { fds: vec![], ino, role: role.clone() }).fds.push(fd);
                }
            } else if let Some(ino) = link_inode(&link, "pipe:[") {
                let stream = if ino == self.stdout_ino {
                    "stdout"
                } else if ino == self.stderr_ino {
                    "stderr"
                } else if ino == self.status_ino {
                    "status"
                } else {
                    continue;
                };
                pipes.entry(ino).or_insert_with(|| ExternalPipe { fds: vec![], ino, stream: stream.into() }).fds.push(fd);
            }
        }
        if !sockets.values().any(|s| s.role == "ctl") {
            bail!("the program no longer holds its control socket (descriptor {PROGRAM_CTL_FD})");
        }
        let mut bin = Criu::locate()?.bin;
        let parent = self.store.tracker.parent(&self.dir, self.rank);
        let extra = self.store.tracker.flags(parent, self.rank, staged.then_some(&self.dir));
        let (mut env, mut fds) = (Vec::new(), Vec::new());
        // The write tracker is of the process holding the control socket (under a PID
        // namespace that is not the tree's root).
        let ctl_ino = sockets.values().find(|s| s.role == "ctl").map(|s| s.ino);
        let program = ctl_ino.and_then(|ino| socket_holder(self.pid, ino)).unwrap_or(self.pid);
        if let Some(t) = self.store.tracker.criu_for_dump(program, CRIU_UFFD_FD)? {
            bin = t.criu;
            env.push(t.env);
            fds.push(t.fd);
        }
        let spec =
            DumpSpec { bin, pid: self.pid, program, dir: dir.to_path_buf(), external_unix: sockets.keys().copied().collect(), leave_stopped, extra, env };
        Ok(DumpPlan { spec, fds, sockets, pipes, parent })
    }

    /// Starts the CRIU of the next dump ahead of it, held at its gate until the program is ready
    /// (`dump_gate`): its start-up (~30-50 ms of kernel probing) is then off the program's stop.
    /// Called as a checkpoint begins (`stop`: a `checkpoint --stop`), where a dump started
    /// earlier that fits is kept, and when the keeper is idle again after one (`stop` false,
    /// the usual next request). A dump that cannot start ahead starts when due, as before.
    fn start_dump_ahead(&mut self, stop: bool) {
        if self.app.is_some() || self.ahead_off || !dump_ahead_wanted() {
            return;
        }
        match self.try_dump_ahead(stop) {
            Ok(Some(a)) => self.early_dump = Some(a),
            Ok(None) => {}
            Err(e) => {
                // Not tried again before the next checkpoint: each try lists the sockets.
                self.ahead_off = true;
                tracing::debug!(target: "keeper", "mpicr[{}]: the next dump starts when due: {e:#}", self.rank);
            }
        }
    }

    /// `start_dump_ahead`'s work: the dump started, or `None` when the one already started fits.
    fn try_dump_ahead(&mut self, stop: bool) -> Result<Option<EarlyDump>> {
        let dir = self.store.ahead_dir(&self.dir);
        let plan = self.plan_dump(&dir, self.store.staged(), stop)?;
        if let Some(a) = self.early_dump.take() {
            if a.fits(&plan.spec) {
                self.early_dump = Some(a);
                return Ok(None);
            }
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        images::private_dir_all(&dir)?;
        let pending = Criu::start_dump(&plan.spec, plan.fds, CRIU_TIMEOUT)?;
        Ok(Some(EarlyDump { dir, pending: Some(pending) }))
    }

    /// Whether the next dump's CRIU can start now: no checkpoint in progress, the program's
    /// agent up, and (incremental dumps) the last dump committed, which is its parent.
    fn idle_for_dump_ahead(&self) -> bool {
        matches!(self.state, State::Running)
            && self.coord.is_some()
            && (self.mode == Mode::NoMpi || self.agent.is_some())
            && self.store.sealing_epoch().is_none()
            && (self.store.tracker.last_dump.is_none() || self.store.tracker.parent(&self.dir, self.rank).is_some())
    }

    /// What an epoch records of this rank, before the parts only a CRIU image has (threads, the
    /// PID namespace, the sockets and pipes CRIU saw, the parent of an incremental dump).
    fn rank_meta(&self, epoch: u64, next_generation: u32) -> RankMeta {
        RankMeta {
            format: images::FORMAT,
            job_id: self.job_id.clone(),
            epoch,
            rank: self.rank,
            size: self.size,
            host: sys::hostname(),
            pid: self.pid,
            tids: Vec::new(),
            pidns: false,
            init_dir: None,
            lower_env: Vec::new(),
            launcher_vars: Vec::new(),
            sockets: Vec::new(),
            pipes: Vec::new(),
            next_generation,
            agent: self.mode == Mode::Agent,
            agent_hello: self.agent.clone(),
            app: None,
            parent_epoch: None,
        }
    }

    /// Lets the program run on right after its image (or an app-mode rank's save) is complete.
    fn resume_after_dump(&mut self, epoch: u64) -> Result<()> {
        self.tell_agent(ToAgent::Resume { restarted: false, epoch, size: self.size, env: Vec::new() })?;
        if let Some(c) = self.state.ckpt_mut() {
            c.resumed = true;
        }
        Ok(())
    }

    /// An app-mode rank's part of a checkpoint: the program already saved its data and the
    /// shim its state; record how to start it again, and let it run on unless the job stops.
    fn app_dump(&mut self, epoch: u64, rdir: &std::path::Path, launch: &crate::app::AppLaunch, leave_stopped: bool, t: Instant) -> Result<RankManifest> {
        // Before the program runs on and renews (see `dump`).
        let next_generation = self.relay.as_ref().map_or(0, |r| r.next_generation());
        if !leave_stopped {
            self.resume_after_dump(epoch)?;
            self.tell_coord(ToCoord::Running { epoch });
        }
        // A fresh start takes the launcher's variables from the new launcher only (`app`).
        let meta = RankMeta { agent: true, ..self.rank_meta(epoch, next_generation) };
        crate::app::record(rdir, meta, launch, t)
    }

    /// The program ended: tell the launcher the right thing and hand back its status.
    fn finish(&mut self, exit: Exit) -> Outcome {
        self.store.remove_staged();
        let clean = self.state.is_stopping() || exit == Exit::Code(0) || self.relay.as_ref().is_some_and(|r| r.program_finalized());
        self.say(&format!("program ended with {exit}{}", if self.state.is_stopping() { " (stopped after the checkpoint)" } else { "" }));
        self.tell_coord(ToCoord::Exiting { status: exit.to_string() });
        // Output first, so that nothing the program printed is lost.
        for h in self.relays.drain(..) {
            join_bounded(h, Duration::from_secs(5));
        }
        if let Some(l) = &self.launcher {
            if clean && !l.finalize(Duration::from_secs(5)) {
                tracing::warn!(target: "keeper", "mpicr[{}]: could not finalize PMI with the launcher", self.rank);
            }
        }
        if let Some(info) = self.coord_info.take() {
            // This process hosts the coordinator: a job that ended well ends for every rank,
            // also one whose keeper has not connected yet (it would find no coordinator).
            if clean && !coordinator::all_joined(JOIN_LIMIT) {
                tracing::warn!(target: "keeper", "mpicr[{}]: not every rank joined the coordinator within {} s of the end", self.rank, JOIN_LIMIT.as_secs());
            }
            // A checkpoint whose dumps are done (the program
            // ran on and ended while they were sealed) is committed, or failed cleanly, first.
            match coordinator::settle(SETTLE_LIMIT) {
                coordinator::Settled::Idle => {}
                coordinator::Settled::Committed(e) => self.say(&format!("checkpoint {e} committed after the program ended")),
                coordinator::Settled::Failed(e, why) => {
                    crate::elog!("mpicr: checkpoint {e} in progress when the program ended was not committed: {why}")
                }
            }
            if !self.state.is_stopping() {
                let code = match exit {
                    Exit::Code(c) => Some(c),
                    Exit::Signal(_) => None,
                };
                let ended = Ended { job_id: info.job_id.clone(), status: exit.to_string(), code, unix: images::now_unix() };
                if let Err(e) = images::write_json_atomic(&ended_path(&self.dir), &ended) {
                    tracing::warn!(target: "keeper", "mpicr: cannot record the job's end: {e:#}");
                }
            }
            if self.state.is_stopping() {
                // Let the other keepers receive `Stop` before this process (and its coordinator) ends.
                std::thread::sleep(Duration::from_millis(200));
            }
            coord_wire::remove_if_ours(&self.dir, &info.job_id, info.pid);
        }
        self.coord = None;
        if self.state.is_stopping() {
            return Outcome::Exit(0);
        }
        match exit {
            Exit::Code(c) => Outcome::Exit(c),
            Exit::Signal(s) => Outcome::Signal(s),
        }
    }
}

fn join_bounded(h: std::thread::JoinHandle<()>, limit: Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = h.join();
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(limit);
}

fn variant(debug: &str) -> String {
    debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("").to_string()
}

/// `(fd, link target)` of every descriptor of `pid` and of its descendants (the init of a PID
/// namespace holds the status pipe, the program below it the keeper's sockets).
fn tree_fds(pid: i32) -> Result<Vec<(i32, String)>> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        match program_fds(p) {
            Ok(v) => out.extend(v),
            // A descendant may end while we look; the root may not.
            Err(e) if p == pid => return Err(e),
            Err(_) => continue,
        }
        todo.extend(children(p));
    }
    Ok(out)
}

/// The children of every thread of `pid`.
/// The first process of the tree at `pid` (root first) holding the socket of inode `ino`.
fn socket_holder(pid: i32, ino: u64) -> Option<i32> {
    let want = format!("socket:[{ino}]");
    let mut todo = std::collections::VecDeque::from([pid]);
    while let Some(p) = todo.pop_front() {
        if program_fds(p).is_ok_and(|v| v.iter().any(|(_, l)| *l == want)) {
            return Some(p);
        }
        todo.extend(children(p));
    }
    None
}

fn children(pid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|c| c.parse::<i32>().ok()).collect::<Vec<_>>())
        .collect()
}

/// `(fd, link target)` of every descriptor of `pid`.
fn program_fds(pid: i32) -> Result<Vec<(i32, String)>> {
    let d = PathBuf::from(format!("/proc/{pid}/fd"));
    let mut out = Vec::new();
    for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
        let e = e?;
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Ok(t) = std::fs::read_link(e.path()) {
            out.push((fd, String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned()));
        }
    }
    out.sort();
    Ok(out)
}

fn link_inode(link: &str, prefix: &str) -> Option<u64> {
    link.strip_prefix(prefix)?.strip_suffix(']')?.parse().ok()
}

/// Every thread id of `pid` and of its descendants.
fn program_tids(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        out.extend(rd.flatten().filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok()));
        todo.extend(children(p));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The message of a panic payload.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_inodes() {
        assert_eq!(link_inode("socket:[123]", "socket:["), Some(123));
        assert_eq!(link_inode("pipe:[9]", "socket:["), None);
        assert_eq!(link_inode("/dev/null", "pipe:["), None);
    }

    #[test]
    fn process_mappings() {
        assert_eq!(nodes_in_mapping("(vector,(0,1,4))"), Some(1));
        assert_eq!(nodes_in_mapping("(vector,(0,2,4))"), Some(2));
        assert_eq!(nodes_in_mapping("(vector,(0,1,3),(1,2,2))"), Some(3));
        assert_eq!(nodes_in_mapping("(vector,(0,18446744073709551615,1),(18446744073709551615,2,1))"), None);
        for bad in ["", "(vector,)", "(vector,(0,1))", "(vector,(a,1,2))", "garbage", "(vector,(0,0,1))"] {
            assert_eq!(nodes_in_mapping(bad), None, "{bad}");
        }
    }

    #[test]
    fn own_tids_include_self() {
        let me = std::process::id() as i32;
        assert!(program_tids(me).contains(&me));
    }
}
