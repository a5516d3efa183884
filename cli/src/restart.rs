//! `mpicr restart`: one keeper per rank restores its rank's image of an epoch under a (possibly
//! new) launcher: checks, new sockets and pipes substituted for the image's ones, `criu restore`,
//! then the job-wide handshake (same job, same epoch) before the agent is told to resume.

use crate::args::RestartArgs;
use crate::coord_wire::{self, AgentInfo, KeeperHello, Mode, SecureTx, ToCoord};
use crate::coordinator;
use crate::criu::Criu;
use crate::images::{self, CkptDir, RankMeta};
use crate::keeper::{
    check_not_running, exchange_coordinator, join_coordinator, launch, new_secret, start_ctl_reader, start_signal_thread, start_waiter, Keeper, Outcome,
    ProgramGuard, CRIU_TIMEOUT, PROGRAM_PID,
};
use crate::pmi_relay::Relay;
use crate::spawn;
use crate::sys;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `mpicr restart`.
pub fn restart(args: RestartArgs) -> Result<Outcome> {
    let dir = CkptDir::new(args.dir.resolve());
    // PMI first (see `run`); then everything that can be checked from the directory alone: a
    // mismatch gives the same clear error on every rank, and the launcher ends the job.
    let (tx, rx) = mpsc::channel();
    start_signal_thread(tx.clone())?;
    // The program in the images speaks the PMI version it spoke at the first run: the keeper
    // initialises that one (an unreadable job.json is reported below, once PMI is up).
    let wire = dir.read_job().ok().and_then(|j| j.pmi_version).and_then(crate::pmi_relay::wire_of_version).unwrap_or(crate::pmi::Wire::V1);
    let l = launch(wire)?;
    dir.secure(false)?;
    let job = dir.read_job()?;
    let manifest = dir.select_epoch(args.epoch)?;
    if manifest.job_id != job.job_id {
        bail!("epoch {} belongs to job {}, but job.json describes job {}", manifest.epoch, manifest.job_id, job.job_id);
    }
    let (rank, size) = (l.rank, l.size);
    if size != manifest.ranks {
        bail!(
            "epoch {} of {} has {} rank(s), but the launcher started {size}: run `mpiexec -n {} mpicr restart {}`",
            manifest.epoch,
            dir.root.display(),
            manifest.ranks,
            manifest.ranks,
            dir.root.display()
        );
    }
    let epoch = manifest.epoch;
    let rdir = dir.rank_dir(epoch, rank);
    let entry = manifest.rank_info.iter().find(|r| r.rank == rank).with_context(|| format!("the manifest of epoch {epoch} has no entry for rank {rank}"))?;
    let t_verify = Instant::now();
    let pages = images::verify_rank_dir_but_pages(&rdir, &entry.files).with_context(|| format!("rank {rank} of epoch {epoch}"))?;
    let verify_first = t_verify.elapsed();
    let meta: RankMeta = images::read_json(&rdir.join("rank.json"))?;
    if meta.rank != rank || meta.epoch != epoch || meta.job_id != job.job_id {
        bail!("{} does not describe rank {rank} of epoch {epoch} of job {}", rdir.join("rank.json").display(), job.job_id);
    }
    let parent_pages = crate::incremental::verify_chain(&dir, &meta, rank)?;
    // Without a PID namespace of its own the program comes back under its old ids, which must
    // be free on this node; with one, CRIU makes a new namespace and the ids are its own.
    let busy = if meta.pidns || meta.app.is_some() { Vec::new() } else { busy_ids(&meta) };
    if !busy.is_empty() {
        bail!(
            "cannot restore rank {rank}: its process ids are in use by live processes: {} (restored processes keep their ids; is the checkpointed job still running?)",
            busy.join(", ")
        );
    }
    let mode = match job.mode.as_str() {
        "no-mpi" => Mode::NoMpi,
        "no-shim" => Mode::NoShim,
        _ => Mode::Agent,
    };
    // Another library underneath (same face), checked before anything is restored.
    let mpi_lib = match crate::mpilib::requested(args.mpi_lib.clone()) {
        Some((_, from)) if meta.agent_hello.as_ref().is_some_and(|h| h.renew_strategy == "sessions") => bail!(
            "{from}: the job renews its library by MPI sessions (MPICR_RENEW=sessions), which keep the checkpointed library loaded; only the namespace renewal (the default) can load another"
        ),
        Some((lib, from)) if mode == Mode::Agent => Some(crate::mpilib::check(
            &lib,
            from,
            true,
            meta.app.as_ref().map_or(std::path::Path::new(&job.program), |a| a.program.as_path()),
            meta.agent_hello.as_ref().map(|h| std::path::Path::new(h.library.as_str())),
        )?),
        Some((_, from)) => bail!("{from}: the job ran in mode {} (no shim), so there is no library to change", job.mode),
        None => None,
    };
    if mode == Mode::Agent {
        let renew_into = mpi_lib.clone().or_else(|| meta.agent_hello.as_ref().map(|h| PathBuf::from(&h.library)));
        if let Some(lib) = renew_into {
            crate::mpilib::check_intel_restore(&lib, epoch, meta.next_generation)?;
            crate::pmix::check_launcher_serves(&lib, l.pmix.as_ref())?;
        }
    }
    if rank == 0 {
        check_not_running(&dir)?;
    }
    // App-mode ranks start afresh: no CRIU on their nodes.
    let criu = match meta.app {
        None => {
            crate::criu::preflight()?;
            Some(Criu::locate()?)
        }
        Some(_) => None,
    };

    let mine = if rank == 0 {
        let key = dir.read_key()?;
        let stop_at = args.stop_before.map(crate::slurm::stop_at).transpose()?;
        let cfg = coordinator::Config {
            dir: dir.clone(),
            job: job.clone(),
            interval: args.interval,
            restart_epoch: Some(epoch),
            verbose: args.verbose,
            key,
            bind: crate::keeper::coordinator_bind(&l),
            stop_at,
            keep: args.store.keep,
        };
        // The job runs again: an earlier end of it is history.
        let _ = std::fs::remove_file(crate::keeper::ended_path(&dir));
        let info = coordinator::start(cfg, new_secret()?)?;
        info.write(&dir)?;
        Some(info)
    } else {
        None
    };
    let info = exchange_coordinator(&l, &dir, mine.as_ref())?;
    if info.job_id != job.job_id {
        bail!("rank 0 restores job {} but this rank found job {}", info.job_id, job.job_id);
    }

    sys::set_child_subreaper().context("becoming child subreaper")?;
    let presented = job.kvsname.clone().unwrap_or_else(|| l.launcher.as_ref().map(|p| p.kvsname.clone()).unwrap_or_default());
    let relay = l.launcher.as_ref().filter(|_| mode != Mode::NoMpi).map(|p| Relay::new(Arc::clone(p), presented, meta.next_generation));

    if let Some(launch) = meta.app.clone() {
        // A fresh program's shim loads MPICH by default; under a PMIx launcher (Open MPI's,
        // `srun --mpi=pmix`) the job ran on Open MPI, which `mpicr run` named to the program
        // (`keeper::open_mpi_underneath`): name it again, the library the rank's agent ran on.
        let mpi_lib = match (mpi_lib, &l.pmix) {
            (None, Some(p)) if mode == Mode::Agent => match meta.agent_hello.as_ref() {
                Some(h) => Some(PathBuf::from(&h.library)),
                None => crate::keeper::open_mpi_underneath(&launch.program, p)?,
            },
            (lib, _) => lib,
        };
        let store = crate::stage::Store::new(tx.clone(), &args.store, &job.job_id, rank, Default::default())?;
        let fresh = Fresh {
            rank,
            size,
            epoch,
            job_id: job.job_id.clone(),
            dir,
            rdir,
            relay,
            info,
            mine,
            mpi_lib,
            verbose: args.verbose,
            mode,
            launcher: l.launcher.clone(),
            store,
        };
        return restart_app(fresh, &launch, meta, tx, rx);
    }
    let criu = criu.context("internal error: no CRIU for a rank restored by CRIU")?;
    let mut inherit: Vec<(OwnedFd, String)> = Vec::new();
    let mut keeper_socks = HashMap::new();
    let mut k_ctl = None;
    let mut pmi_conns = Vec::new();
    for s in &meta.sockets {
        let (k, p) = sys::socketpair()?;
        keeper_socks.insert(sys::inode(k.as_fd())?, s.role.clone());
        inherit.push((p, format!("socket:[{}]", s.ino)));
        match s.role.as_str() {
            "ctl" => k_ctl = Some(k),
            _ => pmi_conns.push(k),
        }
    }
    let mut outs: Vec<(OwnedFd, RawFd, &str)> = Vec::new();
    let (mut stdout_ino, mut stderr_ino, mut status_ino) = (0, 0, 0);
    let mut status = None;
    for p in &meta.pipes {
        let (r, w) = sys::pipe()?;
        let ino = sys::inode(r.as_fd())?;
        inherit.push((w, format!("pipe:[{}]", p.ino)));
        match p.stream.as_str() {
            "stdout" => {
                stdout_ino = ino;
                outs.push((r, 1, "stdout"));
            }
            "status" => {
                status_ino = ino;
                status = Some(r);
            }
            _ => {
                stderr_ino = ino;
                outs.push((r, 2, "stderr"));
            }
        }
    }
    if meta.pidns && status.is_none() {
        bail!("{} says the program ran in a PID namespace but names no status pipe", rdir.join("rank.json").display());
    }
    let k_ctl = k_ctl.context("the image has no control socket")?;
    // The init's working directory as the image knows it (the job may have been checkpointed
    // into this directory under another path).
    let init_dir = meta.pidns.then(|| meta.init_dir.clone().unwrap_or_else(|| dir.init_dir(rank)));
    if let Some(d) = &init_dir {
        images::private_dir_all(d)?;
    }
    let (mut resume_env, lower_env) = crate::pidns::settings_at_restart(&meta.lower_env, crate::pidns::all_ranks_local());
    // Under a PMIx launcher the library underneath meets the new launcher through its PMIx
    // variables: the agent sets them before the next generation loads.
    // Those of the old launcher that the new one does not set go (a job checkpointed under
    // Open MPI 4.1's mpirun and restarted under 5's would otherwise keep ORTE's).
    if l.pmix.is_some() {
        let now = crate::pmix::PmixEnv::launcher_env();
        resume_env.extend(crate::pmix::stale_launcher_vars(&meta.launcher_vars, &now));
        resume_env.extend(now);
    }
    // This launch's --incremental decides whether the restored agent hands over a write tracker.
    let tracker = crate::incremental::Tracker::new(args.store.incremental, Some(criu.bin.as_path()), rank);
    resume_env.push((mpicr_proto::WRITE_TRACK_ENV.to_string(), tracker.write.is_some().then(|| "1".to_string())));
    if let Some(lib) = &mpi_lib {
        resume_env.push((crate::mpilib::MPI_LIB_ENV.to_string(), Some(lib.display().to_string())));
        if args.verbose {
            crate::elog!("mpicr[{rank}]: the lower half will load {}", lib.display());
        }
    }
    let t = Instant::now();
    // Pages compressed on their way here (`--compress`) are expanded for CRIU, then removed.
    let expanded = crate::compress::expand(&crate::compress::chain_dirs(&dir, &meta))?;
    // The page files (the memory-sized part), the epoch's and its parents' (`--incremental`),
    // are checksummed while CRIU restores, which reads them too; the restored tree stays
    // stopped until they match. CRIU parses only files verified above.
    let pages_checked = {
        let all_pages: Vec<_> = std::iter::once((rdir.clone(), pages)).chain(parent_pages).collect();
        std::thread::Builder::new()
            .name("mpicr-verify".into())
            .spawn(move || {
                let t = Instant::now();
                all_pages.iter().try_for_each(|(d, files)| images::verify_files(d, files)).map(|()| t.elapsed())
            })
            .context("starting the thread that verifies the page images")?
    };
    let turn = if crate::ghosts::in_image(&rdir) {
        let (turn, waited) = crate::ghosts::take_turn(CRIU_TIMEOUT).with_context(|| format!("restoring rank {rank} from {}", rdir.display()))?;
        if args.verbose {
            crate::elog!(
                "mpicr[{rank}]: the images hold files deleted while the job ran: restored in turn with this node's other ranks (waited {})",
                crate::args::format_duration(waited)
            );
        }
        Some(turn)
    } else {
        None
    };
    let (restored, lazy) = restore_maybe_lazy(&criu, &rdir, inherit, args.lazy(), rank);
    drop(turn);
    crate::compress::remove(&expanded);
    let t_wait = Instant::now();
    let checked = pages_checked.join().unwrap_or_else(|_| Err(anyhow::anyhow!("internal error while verifying the page images")));
    let waited = t_wait.elapsed();
    let pid = restored.with_context(|| format!("restoring rank {rank} from {}", rdir.display()))?;
    let pages_took = match checked {
        Ok(d) => d,
        Err(e) => {
            crate::keeper::kill_program(pid);
            return Err(e.context(format!("rank {rank} of epoch {epoch}")));
        }
    };
    if args.verbose {
        crate::elog!("mpicr[{rank}]: checksummed the page images in {} while CRIU restored", crate::args::format_duration(pages_took));
        // scripts/bench.sh reads this: what the checksums add to the restart (those of the
        // metadata before CRIU, and the wait for those of the pages after it).
        crate::elog!("mpicr[{rank}]: verified the images of epoch {epoch} in {}", crate::args::format_duration(verify_first + waited));
    }
    if !meta.pidns && pid != meta.pid {
        crate::keeper::kill_program(pid);
        bail!("criu restored pid {pid}, but the image is of pid {}", meta.pid);
    }
    if let Some(d) = lazy {
        serve_lazily(d, pid, rank, args.verbose)?;
    }
    crate::keeper::resume_stopped(pid);
    PROGRAM_PID.store(pid, Ordering::SeqCst);
    let guard = ProgramGuard(pid);
    let relays = outs.into_iter().map(|(fd, to, name)| spawn::relay_output(fd, to, name)).collect::<Result<Vec<_>>>()?;
    start_waiter(pid, status, tx.clone())?;
    let k_ctl = UnixStream::from(k_ctl);
    start_ctl_reader(k_ctl.try_clone()?, tx.clone())?;
    if let Some(relay) = &relay {
        for c in pmi_conns {
            relay.serve(UnixStream::from(c), None)?;
        }
    }
    let hello = KeeperHello {
        rank,
        size,
        job_id: job.job_id.clone(),
        host: sys::hostname(),
        keeper_pid: std::process::id(),
        program_pid: pid,
        mode: mode.clone(),
        restart_epoch: Some(epoch),
    };
    let mut coord = join_coordinator(&info, hello, tx.clone())?;
    announce_restored(&mut coord, &meta, epoch)?;
    if args.verbose {
        crate::elog!("mpicr[{rank}]: restored epoch {epoch} as pid {pid} in {}", crate::args::format_duration(t.elapsed().saturating_sub(waited)));
    }
    let mut k = Keeper {
        rank,
        size,
        mode,
        dir,
        job_id: job.job_id.clone(),
        verbose: args.verbose,
        pid,
        ctl: k_ctl,
        keeper_socks,
        stdout_ino,
        stderr_ino,
        status_ino,
        init_dir,
        lower_env,
        resume_env,
        launcher: l.launcher.clone(),
        relay,
        coord: Some(coord),
        agent: meta.agent_hello.clone(),
        state: crate::keeper_state::State::AwaitingGo { epoch },
        relays,
        coord_info: mine,
        early_dump: None,
        ahead_off: false,
        app: None,
        store: crate::stage::Store::new(tx.clone(), &args.store, &job.job_id, rank, tracker)?,
    };
    let out = k.event_loop(rx);
    if out.is_ok() {
        guard.disarm();
    }
    out
}

/// How long a `criu lazy-pages` daemon may take to listen.
const LAZY_LISTEN: Duration = Duration::from_secs(10);

/// `criu restore` of `rdir`, with lazy pages when asked for and available (then with the
/// daemon serving them). Lazy pages that cannot be had (no userfaultfd, the daemon or the lazy
/// restore failed) are said in one line, and every page is restored up front instead.
fn restore_maybe_lazy(
    criu: &Criu,
    rdir: &std::path::Path,
    inherit: Vec<(OwnedFd, String)>,
    lazy: bool,
    rank: i32,
) -> (Result<i32>, Option<crate::criu::LazyPages>) {
    if !lazy {
        return (criu.restore(rdir, inherit, true, false, CRIU_TIMEOUT), None);
    }
    let fallback = |why: String| crate::elog!("mpicr[{rank}]: lazy pages unavailable: {why}; restoring every page up front");
    if let Some(why) = crate::criu::lazy_pages_unavailable(criu) {
        fallback(why);
        return (criu.restore(rdir, inherit, true, false, CRIU_TIMEOUT), None);
    }
    let daemon = match criu.start_lazy_pages(rdir, LAZY_LISTEN) {
        Ok(d) => d,
        Err(e) => {
            fallback(format!("{e:#}"));
            return (criu.restore(rdir, inherit, true, false, CRIU_TIMEOUT), None);
        }
    };
    // Kept for a second try without lazy pages.
    let spare: std::io::Result<Vec<(OwnedFd, String)>> = inherit.iter().map(|(fd, r)| Ok((fd.try_clone()?, r.clone()))).collect();
    match criu.restore(rdir, inherit, true, true, CRIU_TIMEOUT) {
        Ok(pid) => (Ok(pid), Some(daemon)),
        Err(e) => {
            daemon.kill();
            match spare {
                Ok(spare) => {
                    fallback(format!("{e:#}"));
                    (criu.restore(rdir, spare, true, false, CRIU_TIMEOUT), None)
                }
                Err(_) => (Err(e), None),
            }
        }
    }
}

/// The program is restored with lazy pages: the daemon serves the rest of its memory while it
/// runs. A daemon that fails leaves memory the program would read as zeros (the kernel fills
/// pages of a closed userfaultfd so): the program is killed then, with one line saying why.
/// The daemon is reaped, its socket and log removed, within `CRIU_TIMEOUT`.
fn serve_lazily(d: crate::criu::LazyPages, pid: i32, rank: i32, verbose: bool) -> Result<()> {
    let t = Instant::now();
    std::thread::Builder::new().name("lazy-pages-wait".into()).spawn(move || match d.wait(CRIU_TIMEOUT) {
        Ok(()) => {
            if verbose {
                crate::elog!("mpicr[{rank}]: lazy pages: every page in after {}", crate::args::format_duration(t.elapsed()));
            }
        }
        Err(e) => {
            // A daemon whose program already ended (a zombie, or gone) lost nothing.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()));
            if !matches!(state, None | Some(Some('Z'))) {
                crate::elog!("mpicr[{rank}]: the program's memory could not be restored: {e:#}; ending it");
                crate::keeper::kill_program(pid);
            }
        }
    })?;
    Ok(())
}

/// What `restart` settled for a rank, before it is brought back.
struct Fresh {
    rank: i32,
    size: i32,
    epoch: u64,
    job_id: String,
    dir: CkptDir,
    rdir: PathBuf,
    relay: Option<Arc<Relay>>,
    info: crate::coord_wire::CoordInfo,
    mine: Option<crate::coord_wire::CoordInfo>,
    mpi_lib: Option<PathBuf>,
    verbose: bool,
    mode: Mode,
    launcher: Option<Arc<crate::pmi_relay::Launcher>>,
    store: crate::stage::Store,
}

/// Restart of an app-mode rank: its program starts afresh as it was first started; its
/// `MPI_Init` waits for `Resume` (sent at `Go`, as to a restored agent), rebuilds the MPI state
/// of the rank directory and calls the program's `restore`.
fn restart_app(
    f: Fresh,
    launch: &crate::app::AppLaunch,
    meta: RankMeta,
    tx: mpsc::Sender<crate::keeper::Ev>,
    rx: mpsc::Receiver<crate::keeper::Ev>,
) -> Result<Outcome> {
    let Fresh { rank, size, epoch, job_id, dir, rdir, relay, info, mine, mpi_lib, verbose, mode, launcher, store } = f;
    let rdir = std::path::absolute(&rdir).unwrap_or(rdir);
    let shim = match crate::paths::linked_face(&launch.program) {
        Some(_) => None,
        None => crate::paths::shim(crate::mpilib::program_face(&launch.program)?)?,
    };
    let mut extra: Vec<(String, std::ffi::OsString)> = Vec::new();
    // A namespace and its library settings, as at run (see `keeper::run`).
    let pidns = if crate::pidns::wanted() && crate::pidns::available() {
        extra.extend(crate::pidns::settings_at_run(crate::pidns::all_ranks_local()).0);
        let d = dir.init_dir(rank);
        images::private_dir_all(&d)?;
        Some(d)
    } else {
        None
    };
    if let Some(lib) = &mpi_lib {
        extra.push((crate::mpilib::MPI_LIB_ENV.to_string(), lib.clone().into_os_string()));
    }
    let pmi_fd = relay.as_ref().map(|_| crate::keeper::pmi_fd_number());
    let t = Instant::now();
    let fresh = crate::app::start_fresh(launch, &rdir, shim, pmi_fd, extra, pidns)?;
    let pid = fresh.spawned.pid;
    PROGRAM_PID.store(pid, Ordering::SeqCst);
    let guard = ProgramGuard(pid);
    let stdout_ino = sys::inode(fresh.spawned.stdout.as_fd())?;
    let stderr_ino = sys::inode(fresh.spawned.stderr.as_fd())?;
    let relays = vec![spawn::relay_output(fresh.spawned.stdout, 1, "stdout")?, spawn::relay_output(fresh.spawned.stderr, 2, "stderr")?];
    start_waiter(pid, fresh.spawned.status, tx.clone())?;
    let k_ctl = UnixStream::from(fresh.ctl);
    let mut keeper_socks = HashMap::new();
    keeper_socks.insert(sys::inode(k_ctl.as_fd())?, "ctl".to_string());
    start_ctl_reader(k_ctl.try_clone()?, tx.clone())?;
    if let (Some(relay), Some(k)) = (&relay, fresh.pmi) {
        keeper_socks.insert(sys::inode(k.as_fd())?, "pmi".to_string());
        relay.serve(UnixStream::from(k), None)?;
    }
    let hello = KeeperHello {
        rank,
        size,
        job_id: job_id.clone(),
        host: sys::hostname(),
        keeper_pid: std::process::id(),
        program_pid: pid,
        mode: mode.clone(),
        restart_epoch: Some(epoch),
    };
    let mut coord = join_coordinator(&info, hello, tx.clone())?;
    announce_restored(&mut coord, &meta, epoch)?;
    if verbose {
        crate::elog!("mpicr[{rank}]: started the app-mode program afresh for epoch {epoch} as pid {pid} in {}", crate::args::format_duration(t.elapsed()));
    }
    let mut k = Keeper {
        rank,
        size,
        mode,
        dir,
        job_id,
        verbose,
        pid,
        ctl: k_ctl,
        keeper_socks,
        stdout_ino,
        stderr_ino,
        status_ino: 0,
        init_dir: None,
        lower_env: Vec::new(),
        resume_env: Vec::new(),
        launcher,
        relay,
        coord: Some(coord),
        agent: meta.agent_hello.clone(),
        state: crate::keeper_state::State::AwaitingGo { epoch },
        relays,
        coord_info: mine,
        early_dump: None,
        ahead_off: false,
        app: Some(launch.clone()),
        store,
    };
    let out = k.event_loop(rx);
    if out.is_ok() {
        guard.disarm();
    }
    out
}

/// The ids of the image's processes and threads that live processes of this node hold now.
fn busy_ids(meta: &RankMeta) -> Vec<String> {
    let mut ids = meta.tids.clone();
    ids.push(meta.pid);
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter(|&t| sys::pid_exists(t))
        .map(|t| {
            let comm = std::fs::read_to_string(format!("/proc/{t}/comm")).unwrap_or_default();
            format!("{t} ({})", comm.trim())
        })
        .collect()
}

/// Tells the coordinator this rank is back at `epoch`, with its agent's library as recorded.
fn announce_restored(coord: &mut SecureTx, meta: &RankMeta, epoch: u64) -> Result<()> {
    if let Some(h) = &meta.agent_hello {
        let info = AgentInfo { library: h.library.clone(), renew_strategy: h.renew_strategy.clone(), renewals_left: h.renewals_left };
        coord_wire::send(coord, &ToCoord::AgentHello(info))?;
    }
    coord_wire::send(coord, &ToCoord::Restored { epoch })?;
    Ok(())
}
