//! The harness's error: what failed (a file, a program, a job, a check of a job's outcome), with
//! the path, program or output that says why. Runners print it with `{}` when a case fails, so
//! each variant's text carries everything its cause says (the cause's text included).

use std::fmt::Display;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation (`op`: "read", "create", ...) on `path` failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// An operating-system call that names no file failed (`what`: what was being done).
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: io::Error,
    },
    /// A program could not be started (or waited for).
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// A helper program (the compiler, make, mount, the mpicr CLI...) ran and failed; the text
    /// holds its exit status and output.
    #[error("{0}")]
    Command(String),
    /// A job ran out of its time.
    #[error("timed out after {} s", .0.as_secs())]
    Timeout(Duration),
    /// A job was interrupted (SIGINT/SIGTERM to the runner).
    #[error("interrupted")]
    Interrupted,
    /// A job was stopped before it ended by itself (`cause`: a timeout, an interrupt or the
    /// driver's error), with the processes killed and the last lines of its output.
    #[error("{cause}; stopped mpiexec{}\n{tails}", killed_list(.killed))]
    Stopped { cause: Box<Error>, killed: Vec<String>, tails: String },
    /// Something the run needs is missing: an MPI tool, a wheel, a build output, a package.
    #[error("{0}")]
    Missing(String),
    /// Malformed input: a command-line option, an environment variable, a test's header, a
    /// conformance list or testlist line.
    #[error("{0}")]
    Invalid(String),
    /// A run's output differs from the oracle's (the native run) or from what was expected.
    #[error("{0}")]
    Mismatch(String),
    /// A job's outcome broke a rule the harness checks: exit status, a verdict line, files or
    /// processes left behind, an answer of the mpicr CLI, a checkpoint's epochs.
    #[error("{0}")]
    Check(String),
    /// A failed case with its full report (for a checkpoint case: the seed, what happened, the
    /// launches' stderr, `mpicr status`, the CRIU logs); `cause` is its summary.
    #[error("{report}")]
    Reported {
        report: String,
        #[source]
        cause: Box<Error>,
    },
    /// `source`, met while doing `context`.
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
    /// A failure computed once (a build, a library copy, an oracle run) and reported to every
    /// case that needed its result.
    #[error(transparent)]
    Shared(Arc<Error>),
}

fn killed_list(killed: &[String]) -> String {
    if killed.is_empty() {
        String::new()
    } else {
        format!("; killed {}", killed.join(", "))
    }
}

impl Error {
    /// For `map_err`: the file system operation `op` on `path` failed.
    pub fn io(op: &'static str, path: impl AsRef<Path>) -> impl FnOnce(io::Error) -> Error {
        let path = path.as_ref().to_path_buf();
        move |source| Error::Io { op, path, source }
    }

    /// For `map_err`: a system call that names no file failed while doing `what`.
    pub fn os(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |source| Error::Os { what, source }
    }

    /// For `map_err`: `program` could not be started.
    pub fn spawn(program: impl Display) -> impl FnOnce(io::Error) -> Error {
        let program = program.to_string();
        move |source| Error::Spawn { program, source }
    }

    /// This error, met while doing `context`.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context { context: context.into(), source: Box::new(self) }
    }

    /// This error, to be handed to several callers (see [`Error::Shared`]).
    pub fn shared(self) -> Arc<Error> {
        match self {
            Error::Shared(e) => e,
            e => Arc::new(e),
        }
    }
}

/// Adds what was being done to an error on its way up.
pub trait Context<T> {
    fn context(self, context: impl Into<String>) -> Result<T>;
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T> Context<T> for Result<T> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| e.context(context))
    }
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.context(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_carry_their_causes() {
        let e = Error::io("read", "/x/y")(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.to_string(), "cannot read /x/y: entity not found");
        let e = Error::Check("exited with 1".into()).context("the restart");
        assert_eq!(e.to_string(), "the restart: exited with 1");
        let e =
            Error::Stopped { cause: Box::new(Error::Timeout(Duration::from_secs(3))), killed: vec!["1 (a)".into(), "2 (b)".into()], tails: "  tail\n".into() };
        assert_eq!(e.to_string(), "timed out after 3 s; stopped mpiexec; killed 1 (a), 2 (b)\n  tail\n");
        let shared = Error::Interrupted.shared();
        assert_eq!(Error::Shared(shared).to_string(), "interrupted");
    }
}
