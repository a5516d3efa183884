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

use std::ffi::OsString;

/// Names the keeper (its pid) in the environment of `criu restore` and of its action scripts.
pub const KEEPER_ENV: &str = "MPICR_RESTORE_KEEPER";
const ACTION_ENV: &str = "CRTOOLS_SCRIPT_ACTION";
const ROOT_ENV: &str = "CRTOOLS_INIT_PID";

/// The options and environment that make `criu restore` run this guard, or none when this
/// binary cannot be named (then the restore is as unguarded as CRIU makes it).
pub fn criu_options() -> Option<(Vec<OsString>, (String, String))> {
    let exe = std::env::current_exe().ok().filter(|p| crate::sys::is_executable(p))?;
    Some((vec!["--action-script".into(), exe.into_os_string()], (KEEPER_ENV.to_string(), std::process::id().to_string())))
}

/// When this process is CRIU's action script (`mpicr` run with no arguments by a guarded
/// restore): its exit status. `None` for every other invocation.
pub fn action_from_env(args: &[OsString]) -> Option<i32> {
    if args.len() != 1 {
        return None;
    }
    let keeper: i32 = std::env::var(KEEPER_ENV).ok()?.parse().ok()?;
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

    #[test]
    fn a_dead_keeper_fails_the_restore() {
        let me = std::process::id() as i32;
        let not_parent = crate::sys::parent_of(me).unwrap() + 1_000_000;
        assert_eq!(act("post-restore", not_parent, Some(me)), 1);
        // Stages where nothing can be done are left alone.
        assert_eq!(act("pre-restore", not_parent, Some(me)), 0);
    }
}
