//! A restored tree never outlives a keeper that died while CRIU restored it.
//!
//! CRIU creates the restored root as the keeper's child (`--restore-sibling`) but sets its
//! parent-death signal only near the end of the restore, and tasks whose `criu` dies mid-restore
//! wait on CRIU's futexes for ever. A launcher that ends a job while a rank is being restored
//! (Hydra kills each rank's process group when another rank fails) left such trees behind:
//! measured, `mpicr-init` and the program asleep for good after the keeper's group was killed
//! 150 ms into a restore.
//!
//! So `criu restore` runs in a process group of its own and without a parent-death signal (it
//! finishes, or fails and kills what it made, whatever happens to the keeper), and with this
//! binary as its action script (`--action-script`; CRIU runs it with no arguments and says the
//! stage in `CRTOOLS_SCRIPT_ACTION`, the restored root in `CRTOOLS_INIT_PID`). At two stages the
//! script asks whether the root's parent is still the keeper:
//! - `post-restore` (before CRIU sets the parent-death signal): if not, it fails, and CRIU kills
//!   the tree and reports the restore failed;
//! - `post-resume` (after the signal is set, so a keeper that dies from then on takes the tree
//!   with it): if not, it kills the tree itself.
//!
//! A parent that changed is final (an orphan is never given back), so no death goes unseen.
//!
//! Between those stages CRIU ptraces the restored tree, and the root's parent-death signal is set
//! there too: a keeper that dies then kills the root while CRIU traces it. When the root is the
//! init of a PID namespace, its exit waits for its children, which as CRIU's tracees wait for
//! CRIU to reap them, while CRIU waits for the root: measured, `criu` and `mpicr-init` asleep
//! for good (1 restore in 8 killed under load). No script runs in that window, so each guarded
//! restore has a watcher too (`start_watcher`): a process outside the keeper's process group that
//! lives as long as CRIU and, once the keeper is gone, kills CRIU's tracees and CRIU itself.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// Names the keeper (its pid) in the environment of `criu restore` and of its action scripts.
pub const KEEPER_ENV: &str = "MPICR_RESTORE_KEEPER";
const ACTION_ENV: &str = "CRTOOLS_SCRIPT_ACTION";
const ROOT_ENV: &str = "CRTOOLS_INIT_PID";
/// Makes `mpicr` (run with no arguments) a restore's watcher: CRIU's pid and the restore's time
/// limit in seconds, `PID:SECONDS`; CRIU's pidfd is descriptor `WATCH_FD`.
const WATCH_ENV: &str = "MPICR_RESTORE_WATCH";
const WATCH_FD: RawFd = 3;

/// The options and environment that make `criu restore` run this guard, or none when this
/// binary cannot be named (then the restore is as unguarded as CRIU makes it).
pub fn criu_options() -> Option<(Vec<OsString>, (String, String))> {
    let exe = crate::paths::runnable_exe()?;
    Some((vec!["--action-script".into(), exe.into_os_string()], (KEEPER_ENV.to_string(), std::process::id().to_string())))
}

/// Starts the watcher of the guarded restore whose CRIU is `criu` (the keeper's child, not yet
/// reaped, so that its pid is still CRIU's), with the restore's time limit. Its pid, or `None`
/// when it cannot be started (the restore then runs with the action script alone).
pub fn start_watcher(criu: i32, limit: Duration) -> Option<i32> {
    let exe = crate::paths::runnable_exe()?;
    let pidfd = crate::sys::pidfd_open(criu).ok()?;
    // Parked above WATCH_FD, so that the move in the child cannot land on itself.
    let parked = crate::sys::dup_at_least(pidfd.as_fd(), WATCH_FD + 1).ok()?;
    let from = parked.as_raw_fd();
    let mut cmd = std::process::Command::new(exe);
    cmd.env(WATCH_ENV, format!("{criu}:{}", limit.as_secs().max(1)))
        .env(KEEPER_ENV, std::process::id().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        // Out of the keeper's process group: a launcher that kills that group leaves it running.
        .process_group(0);
    // SAFETY: only dup2 (async-signal-safe) on integers computed before fork.
    unsafe {
        cmd.pre_exec(move || crate::sys::child_dup2(from, WATCH_FD));
    }
    let mut child = cmd.spawn().ok()?;
    let pid = child.id() as i32;
    std::thread::spawn(move || child.wait());
    Some(pid)
}

/// When this process is CRIU's action script (`mpicr` run with no arguments by a guarded
/// restore) or a restore's watcher: its exit status. `None` for every other invocation.
pub fn action_from_env(args: &[OsString]) -> Option<i32> {
    if args.len() != 1 {
        return None;
    }
    let keeper: i32 = std::env::var(KEEPER_ENV).ok()?.parse().ok()?;
    if let Ok(spec) = std::env::var(WATCH_ENV) {
        let (criu, secs) = spec.split_once(':')?;
        let pidfd = crate::sys::take_inherited(WATCH_FD)?;
        return Some(watch(keeper, criu.parse().ok()?, pidfd.as_fd(), Duration::from_secs(secs.parse().ok()?)));
    }
    let action = std::env::var(ACTION_ENV).ok()?;
    let root: Option<i32> = std::env::var(ROOT_ENV).ok().and_then(|v| v.parse().ok());
    Some(act(&action, keeper, root))
}

fn act(action: &str, keeper: i32, root: Option<i32>) -> i32 {
    let Some(root) = root.filter(|&r| r > 0) else { return 0 };
    if !matches!(action, "post-restore" | "post-resume") || crate::sys::parent_of(root) == Some(keeper) {
        return 0;
    }
    if action == "post-resume" {
        // CRIU no longer kills anything after this stage: the root is the init of the program's
        // PID namespace (its death ends the namespace) or, without one, the program.
        crate::keeper::kill_program(root);
    }
    crate::elog!("mpicr: the keeper (pid {keeper}) ended while CRIU restored its program: the restored processes are ended too");
    1
}

/// The watcher: returns once CRIU has ended. While the keeper lives it only waits. Once the keeper
/// is gone, CRIU is killed with every process it traces as soon as it traces any (the window the
/// action script cannot see), or when it outlives the restore's time limit.
fn watch(keeper: i32, criu_pid: i32, criu: BorrowedFd<'_>, limit: Duration) -> i32 {
    use crate::sys;
    // The keeper is our parent: a pidfd opened while it still is refers to the keeper.
    if let Ok(kfd) = sys::pidfd_open(keeper) {
        if sys::parent_of(std::process::id() as i32) == Some(keeper) {
            match sys::poll_readable(&[criu, kfd.as_fd()], None) {
                Ok(Some(1)) => {}
                _ => return 0,
            }
        }
    }
    let until = Instant::now() + limit;
    loop {
        if !matches!(sys::poll_readable(&[criu], Some(Duration::from_millis(5))), Ok(None)) {
            return 0;
        }
        let tracees = sys::tracees_of(criu_pid);
        if tracees.is_empty() && Instant::now() < until {
            continue;
        }
        for &t in &tracees {
            let _ = sys::kill(t, libc::SIGKILL);
        }
        let _ = sys::pidfd_kill(criu, libc::SIGKILL);
        crate::elog!("mpicr: the keeper (pid {keeper}) ended while CRIU restored its program: CRIU and the restored processes are ended too");
        let _ = sys::poll_readable(&[criu], Some(Duration::from_secs(10)));
        return 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_invocations_are_not_the_guard() {
        assert_eq!(action_from_env(&["mpicr".into(), "status".into()]), None);
    }

    #[test]
    fn a_live_keeper_passes_every_stage() {
        let me = std::process::id() as i32;
        let parent = crate::sys::parent_of(me).unwrap();
        for a in ["pre-restore", "setup-namespaces", "post-restore", "pre-resume", "post-resume", "network-unlock"] {
            assert_eq!(act(a, parent, Some(me)), 0, "{a}");
        }
        assert_eq!(act("post-restore", parent, None), 0);
    }

    /// A stand-in for CRIU: `sleep SECS`, with its pidfd.
    fn fake_criu(secs: &str) -> (std::process::Child, std::os::fd::OwnedFd) {
        let child = std::process::Command::new("sleep").arg(secs).spawn().unwrap();
        let fd = crate::sys::pidfd_open(child.id() as i32).unwrap();
        (child, fd)
    }

    #[test]
    fn the_watcher_leaves_a_restore_whose_keeper_lives() {
        let (mut criu, fd) = fake_criu("0.2");
        let parent = crate::sys::parent_of(std::process::id() as i32).unwrap();
        assert_eq!(watch(parent, criu.id() as i32, fd.as_fd(), Duration::from_secs(30)), 0);
        assert!(criu.wait().unwrap().success(), "CRIU ran to its end");
    }

    #[test]
    fn without_its_keeper_a_criu_that_traces_nothing_may_finish_but_not_outlive_its_limit() {
        let gone = crate::sys::parent_of(std::process::id() as i32).unwrap() + 1_000_000;
        let (mut criu, fd) = fake_criu("0.2");
        assert_eq!(watch(gone, criu.id() as i32, fd.as_fd(), Duration::from_secs(30)), 0);
        assert!(criu.wait().unwrap().success(), "CRIU ran to its end");
        let (mut criu, fd) = fake_criu("60");
        let t = Instant::now();
        assert_eq!(watch(gone, criu.id() as i32, fd.as_fd(), Duration::from_secs(1)), 1);
        assert!(!criu.wait().unwrap().success(), "CRIU was killed");
        assert!(t.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_dead_keeper_fails_the_restore() {
        let me = std::process::id() as i32;
        let not_parent = crate::sys::parent_of(me).unwrap() + 1_000_000;
        assert_eq!(act("post-restore", not_parent, Some(me)), 1);
        // Stages where nothing can be done are left alone.
        assert_eq!(act("pre-restore", not_parent, Some(me)), 0);
    }
}
