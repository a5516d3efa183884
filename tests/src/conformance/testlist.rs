//! MPICH's `testlist` files: which programs of a directory of `test/mpi` run, at how many
//! ranks, with which arguments and environment.
//!
//! One entry a line, `program [ranks [key=value ...]]`, `#` starting a comment. A first word
//! that names a subdirectory (of the build tree) stands for that directory's own `testlist`
//! (how `threads/` lists `pt2pt`, `comm`, ...); a line `!dir:target` asks for a build step
//! and is not a test. Keys: `arg=` (one program argument each), `env=NAME=VALUE`,
//! `timeLimit=` (seconds), `resultTest=` (a verdict other than " No Errors", see `Judge`),
//! `xfail=REASON` (MPICH itself expects a failure: skipped, as MPICH's `runtests` does unless
//! configured with --enable-xfail), `strict=false` (uses MPICH extensions: run, as
//! `runtests` does outside its strict mode), `mpix=`, `mem=` and `lock=` (run). Words that are
//! not key=value are passed over, as `runtests` does; an unknown key
//! is an error, so that a list this code cannot read never loses tests silently.
//!
//! A `testlist` produced by MPICH's configure (from `testlist.in`) sits in the build tree;
//! the others only in the source tree: the build tree's is read when it is there and not
//! empty, as `runtests` does. Only `testlist` is read, not the generated `testlist.dtp`
//! (datatype-pool variants) or `testlist.cvar` (algorithm selections at 10 ranks) that
//! `make testing` also runs.

use crate::error::Error;
use std::fmt;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// Ranks of an entry that gives none (MPICH's `runtests` default).
pub const DEFAULT_RANKS: u32 = 2;
/// Time limit of an entry that gives none (MPICH's `runtests` default).
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(180);

/// How a run's outcome is judged (MPICH's `resultTest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judge {
    /// The default: exit status 0, and the output of every process (stdout and stderr, and
    /// `mpiexec`'s own) is exactly one line " No Errors", give or take blanks, plus any
    /// number of "Test Passed" lines.
    NoErrors,
    /// `TestStatus` and `TestErrFatal`: the job must end with a non-zero exit status (tests of
    /// `MPI_Abort`, of exit codes and of `MPI_ERRORS_ARE_FATAL`); any output is allowed.
    NonZeroExit,
}

/// One line of a `testlist`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Directory relative to `test/mpi`, e.g. `threads/pt2pt`.
    pub dir: String,
    pub program: String,
    pub ranks: u32,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub time_limit: Duration,
    pub judge: Judge,
    /// MPICH's own reason for expecting a failure (`xfail=`): not run.
    pub xfail: Option<String>,
}

impl Entry {
    /// `dir/program/npN`, and `/ARG,ARG` when the entry has arguments, `/ENV,ENV` when it
    /// has environment, so that entries of one program differ: what lists and filters match.
    pub fn id(&self) -> String {
        let mut id = format!("{}/{}/np{}", self.dir, self.program, self.ranks);
        if !self.args.is_empty() {
            id.push('/');
            id.push_str(&self.args.join(","));
        }
        if !self.env.is_empty() {
            let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            id.push('/');
            id.push_str(&env.join(","));
        }
        id
    }

    /// The top-level directory (`threads` for `threads/pt2pt`): what the counts are kept by.
    pub fn top_dir(&self) -> &str {
        self.dir.split('/').next().unwrap_or(&self.dir)
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.id())
    }
}

/// Every entry of `dir` (relative to `test/mpi`) and of the directories its list names,
/// in list order. `build` is the configured build tree, `source` the source's `test/mpi`.
pub fn read_dir(build: &Path, source: &Path, dir: &str) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    read_into(build, source, dir, 0, &mut entries)?;
    Ok(entries)
}

fn read_into(build: &Path, source: &Path, dir: &str, depth: u32, out: &mut Vec<Entry>) -> Result<(), Error> {
    if depth > 4 {
        return Err(Error::Invalid(format!("{dir}: testlists nested too deep")));
    }
    let built = build.join(dir).join("testlist");
    let path = if fs::metadata(&built).is_ok_and(|m| m.len() > 0) { built } else { source.join(dir).join("testlist") };
    let text = fs::read_to_string(&path).map_err(Error::io("read", &path))?;
    for (n, line) in text.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), n + 1);
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('!') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if build.join(dir).join(first).is_dir() {
            read_into(build, source, &format!("{dir}/{first}"), depth + 1, out)?;
            continue;
        }
        out.push(parse_line(dir, line).map_err(|e| Error::Invalid(format!("{}: {e}", at())))?);
    }
    Ok(())
}

/// One entry line (comment stripped, not empty) of the list of `dir`.
pub fn parse_line(dir: &str, line: &str) -> Result<Entry, Error> {
    let mut words = line.split_whitespace();
    let program = words.next().ok_or_else(|| Error::Invalid("an empty line".into()))?.to_string();
    let mut e = Entry {
        dir: dir.to_string(),
        program,
        ranks: DEFAULT_RANKS,
        args: Vec::new(),
        env: Vec::new(),
        time_limit: DEFAULT_TIME_LIMIT,
        judge: Judge::NoErrors,
        xfail: None,
    };
    let mut rest = words.peekable();
    if let Some(w) = rest.peek() {
        if !w.contains('=') {
            e.ranks = w.parse().map_err(|_| Error::Invalid(format!("`{w}` is not a number of ranks")))?;
            rest.next();
        }
    }
    for w in rest {
        // `runtests` passes over a word that is not key=value (pt2pt/testlist.in has one)
        let Some((key, value)) = w.split_once('=') else {
            continue;
        };
        match key {
            "arg" => e.args.push(value.to_string()),
            "env" => {
                let (k, v) = value.split_once('=').ok_or_else(|| Error::Invalid(format!("env=`{value}` is not NAME=VALUE")))?;
                e.env.push((k.to_string(), v.to_string()));
            }
            "timeLimit" => {
                let s: u64 = value.parse().map_err(|_| Error::Invalid(format!("timeLimit=`{value}` is not seconds")))?;
                e.time_limit = Duration::from_secs(s);
            }
            "resultTest" => {
                e.judge = match value {
                    "TestStatus" | "TestErrFatal" => Judge::NonZeroExit,
                    other => return Err(Error::Invalid(format!("resultTest=`{other}` is not known here"))),
                }
            }
            "xfail" => {
                if value.is_empty() {
                    return Err(Error::Invalid("xfail= without a reason".into()));
                }
                e.xfail = Some(value.to_string());
            }
            "strict" | "mpix" | "mem" | "lock" => {}
            other => return Err(Error::Invalid(format!("unknown key `{other}`"))),
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        let e = parse_line("coll", "allred 4 arg=100 env=A=1 timeLimit=30").unwrap();
        assert_eq!(e.ranks, 4);
        assert_eq!(e.args, ["100"]);
        assert_eq!(e.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(e.time_limit, Duration::from_secs(30));
        assert_eq!(e.id(), "coll/allred/np4/100/A=1");
        let e = parse_line("init", "exitst1 2 resultTest=TestStatus").unwrap();
        assert_eq!(e.judge, Judge::NonZeroExit);
        let e = parse_line("attr", "attrt").unwrap();
        assert_eq!((e.ranks, e.id().as_str()), (2, "attr/attrt/np2"));
        let e = parse_line("rma", "x 2 xfail=ticket123 strict=false").unwrap();
        assert_eq!(e.xfail.as_deref(), Some("ticket123"));
        assert!(parse_line("rma", "x 2 color=red").is_err());
        assert_eq!(parse_line("pt2pt", "x 1 a/b arg=1").unwrap().args, ["1"]);
        assert!(parse_line("rma", "x two").is_err());
        assert!(parse_line("rma", "x 2 resultTest=Other").is_err());
    }

    #[test]
    fn subdirectories_and_source_fallback() {
        let t = std::env::temp_dir().join(format!("mpicr-testlist-{}", std::process::id()));
        let (b, s) = (t.join("build"), t.join("src"));
        fs::create_dir_all(b.join("threads/pt2pt")).unwrap();
        fs::create_dir_all(s.join("threads/pt2pt")).unwrap();
        fs::write(b.join("threads/testlist"), "pt2pt\n# comment\n!util:lib\n").unwrap();
        // empty in the build tree: the source's list counts
        fs::write(b.join("threads/pt2pt/testlist"), "").unwrap();
        fs::write(s.join("threads/pt2pt/testlist"), "threads 2 timeLimit=600\n").unwrap();
        let got = read_dir(&b, &s, "threads").unwrap();
        fs::remove_dir_all(&t).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id(), "threads/pt2pt/threads/np2");
        assert_eq!(got[0].top_dir(), "threads");
    }
}
