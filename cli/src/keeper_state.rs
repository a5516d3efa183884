//! Where a keeper stands, one state for `run` and `restart` alike, and its transitions.
//!
//! ```text
//!  run ──> Running ──Begin──> Checkpoint ──Resumed / Abort / lost agent or coordinator──> Running
//!              ^                  │
//!              │                  └──Stop──> Stopping   (also from any other state)
//!  restart ──> AwaitingGo ──Go (agent)──> ResumingRestart ──Resumed──> Running (or Checkpoint)
//!                  │                          └──Begin──> ResumingRestart with the checkpoint next
//!                  └──Go (no agent)──> Running
//! ```
//! A `Begin` may reach a rank whose agent has not yet said `Resumed` after a restart (another
//! rank resumed first and the coordinator began the next checkpoint): the checkpoint is then
//! held in `ResumingRestart` and becomes the state when the agent resumes (it handles its
//! messages in order, so `Resumed` comes first).

/// A checkpoint in progress on this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CkptState {
    pub(crate) epoch: u64,
    pub(crate) stop: bool,
    /// The dump left the program stopped (`--stop`); an abort must continue it.
    pub(crate) stopped: bool,
    /// The program was told to resume right after this rank's dump (before the commit).
    pub(crate) resumed: bool,
    /// The agent reported `Failed` and recovers on its own; the checkpoint stays known until the
    /// coordinator's `Abort`, whose verdict (and a `Release` sent before it) still goes to the
    /// agent: after `Drained` it waits for that verdict. Nothing else is forwarded or done.
    pub(crate) agent_failed: bool,
}

impl CkptState {
    pub(crate) fn new(epoch: u64, stop: bool) -> CkptState {
        CkptState { epoch, stop, stopped: false, resumed: false, agent_failed: false }
    }
}

/// The keeper's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// The program runs; no checkpoint in progress.
    Running,
    /// A checkpoint is in progress.
    Checkpoint(CkptState),
    /// Restart: restored, waiting for the coordinator's `Go` for `epoch`.
    AwaitingGo { epoch: u64 },
    /// Restart: `Resume{restarted}` sent, waiting for the agent's `Resumed`; `next` is a
    /// checkpoint that began meanwhile.
    ResumingRestart { epoch: u64, next: Option<CkptState> },
    /// `checkpoint --stop` committed: the program is being ended.
    Stopping,
}

/// Why a checkpoint cannot begin in this state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BeginError {
    #[error("this rank has not resumed from epoch {0} yet")]
    Restarting(u64),
    #[error("this rank is stopping")]
    Stopping,
}

impl State {
    /// The state's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Running => "running",
            State::Checkpoint(_) => "checkpoint",
            State::AwaitingGo { .. } => "awaiting-go",
            State::ResumingRestart { .. } => "resuming-restart",
            State::Stopping => "stopping",
        }
    }

    /// The checkpoint in progress, if any.
    pub(crate) fn ckpt(&self) -> Option<&CkptState> {
        match self {
            State::Checkpoint(c) | State::ResumingRestart { next: Some(c), .. } => Some(c),
            _ => None,
        }
    }

    pub(crate) fn ckpt_mut(&mut self) -> Option<&mut CkptState> {
        match self {
            State::Checkpoint(c) | State::ResumingRestart { next: Some(c), .. } => Some(c),
            _ => None,
        }
    }

    /// Is `epoch` the checkpoint in progress here (and the agent still in it)?
    pub(crate) fn in_ckpt(&self, epoch: u64) -> bool {
        self.ckpt().is_some_and(|c| c.epoch == epoch && !c.agent_failed)
    }

    /// `Begin`: a new checkpoint (it replaces one still known here, as the coordinator has
    /// moved on from it).
    pub(crate) fn begin(&mut self, c: CkptState) -> Result<(), BeginError> {
        match self {
            State::Running | State::Checkpoint(_) => *self = State::Checkpoint(c),
            State::ResumingRestart { next, .. } => *next = Some(c),
            State::AwaitingGo { epoch } => return Err(BeginError::Restarting(*epoch)),
            State::Stopping => return Err(BeginError::Stopping),
        }
        Ok(())
    }

    /// The checkpoint in progress ends (resumed, aborted, failed, lost): returns it.
    pub(crate) fn end_ckpt(&mut self) -> Option<CkptState> {
        match self {
            State::Checkpoint(_) => match std::mem::replace(self, State::Running) {
                State::Checkpoint(c) => Some(c),
                _ => unreachable!(),
            },
            State::ResumingRestart { next, .. } => next.take(),
            _ => None,
        }
    }

    /// `Go{epoch}`: moves on (to `ResumingRestart` when the agent must be told, else
    /// `Running`); false when this is not the epoch this rank waits for.
    pub(crate) fn go(&mut self, epoch: u64, with_agent: bool) -> bool {
        if *self != (State::AwaitingGo { epoch }) {
            return false;
        }
        *self = if with_agent { State::ResumingRestart { epoch, next: None } } else { State::Running };
        true
    }

    /// The restart epoch whose `Go` this rank waits for.
    pub(crate) fn awaiting_go(&self) -> Option<u64> {
        match self {
            State::AwaitingGo { epoch } => Some(*epoch),
            _ => None,
        }
    }

    /// The agent said `Resumed` (or `Failed`) after a restart: the restart epoch, if this
    /// rank waited for it; the state moves on to `Running` or the checkpoint that began meanwhile.
    pub(crate) fn restart_resumed(&mut self) -> Option<u64> {
        let State::ResumingRestart { epoch, next } = self else { return None };
        let epoch = *epoch;
        *self = match next.take() {
            Some(c) => State::Checkpoint(c),
            None => State::Running,
        };
        Some(epoch)
    }

    /// `Stop`: the program is ended; any checkpoint state is dropped.
    pub(crate) fn stop(&mut self) {
        *self = State::Stopping;
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self == State::Stopping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_checkpoint_resume_and_abort() {
        let mut s = State::Running;
        assert_eq!(s.ckpt(), None);
        s.begin(CkptState::new(1, false)).unwrap();
        assert!(s.in_ckpt(1) && !s.in_ckpt(2));
        s.ckpt_mut().unwrap().agent_failed = true;
        assert!(!s.in_ckpt(1), "a failed agent is out of the checkpoint");
        assert_eq!(s.ckpt().map(|c| c.epoch), Some(1), "but the checkpoint stays known for the verdict");
        assert_eq!(s.end_ckpt().map(|c| c.epoch), Some(1));
        assert_eq!(s, State::Running);
        assert_eq!(s.end_ckpt(), None);
        // A new Begin replaces a checkpoint the coordinator gave up.
        s.begin(CkptState::new(2, false)).unwrap();
        s.begin(CkptState::new(3, true)).unwrap();
        assert_eq!(s.ckpt().map(|c| (c.epoch, c.stop)), Some((3, true)));
        s.stop();
        assert!(s.is_stopping() && s.ckpt().is_none());
        assert_eq!(s.begin(CkptState::new(4, false)), Err(BeginError::Stopping));
        assert_eq!(s.restart_resumed(), None);
    }

    #[test]
    fn restart_waits_for_go_then_for_the_agent() {
        let mut s = State::AwaitingGo { epoch: 5 };
        assert_eq!(s.awaiting_go(), Some(5));
        assert_eq!(s.begin(CkptState::new(6, false)), Err(BeginError::Restarting(5)));
        assert!(!s.go(4, true), "Go for another epoch");
        assert_eq!(s, State::AwaitingGo { epoch: 5 });
        assert!(s.go(5, true));
        assert_eq!(s, State::ResumingRestart { epoch: 5, next: None });
        assert!(!s.go(5, true), "a second Go");
        assert_eq!(s.restart_resumed(), Some(5));
        assert_eq!(s, State::Running);
        assert_eq!(s.restart_resumed(), None);
    }

    #[test]
    fn restart_without_agent_runs_at_go() {
        let mut s = State::AwaitingGo { epoch: 2 };
        assert!(s.go(2, false));
        assert_eq!(s, State::Running);
    }

    /// Another rank resumed first and the next checkpoint began before this agent's `Resumed`.
    #[test]
    fn a_checkpoint_that_begins_while_resuming_a_restart_follows_it() {
        let mut s = State::AwaitingGo { epoch: 3 };
        assert!(s.go(3, true));
        s.begin(CkptState::new(4, false)).unwrap();
        assert!(s.in_ckpt(4), "the checkpoint's messages are forwarded");
        assert_eq!(s.restart_resumed(), Some(3));
        assert_eq!(s, State::Checkpoint(CkptState::new(4, false)));
        // Ending it while the restart's resume is pending keeps waiting for the agent.
        let mut s = State::ResumingRestart { epoch: 3, next: Some(CkptState::new(4, false)) };
        assert_eq!(s.end_ckpt().map(|c| c.epoch), Some(4));
        assert_eq!(s, State::ResumingRestart { epoch: 3, next: None });
        assert_eq!(s.name(), "resuming-restart");
    }
}
