//! Test metadata: the `mpicr-test:` line in the first comment of every `c-tests/*.c`.
//!
//! ```c
//! /* mpicr-test: ranks=1,2,4 args=200,{tmpdir} long-args=20000,{tmpdir} long-args.4=5000 timeout=60 */
//! ```
//! Keys are `key=value` separated by blanks; list values are comma-separated (so an argument
//! cannot contain a blank or a comma, which no test needs). `long-args.N` overrides
//! `long-args` for N ranks: how long a run takes depends mostly on the rank count (4 ranks
//! oversubscribe 2 cores). Unknown keys are errors, so a typo cannot silently drop a test from
//! the matrix.
//!
//! The checkpoint matrix is opt-in: `ckpt-ranks=2,4` puts a test in it at those rank counts
//! (it needs `long-args`, whose first value is the test's step count: see `t_pause_point` and
//! `t_pace` in c-tests/common.h), and `ckpt-modes=continue,stop-restart` restricts the
//! checkpoint modes it runs in (default: `DEFAULT_CKPT_MODES`). `ckpt-pace=US` sets the sleep
//! per step in those modes (default `DEFAULT_CKPT_PACE_US`), `ckpt-pace.N=US` for N ranks: a
//! run lasts at least steps x pace, and the random instants of the checkpoint modes fall within
//! 10-60 % of that, so the pace should dominate a step's duration. (4 busy-polling ranks on 2
//! cores make some steps 10-50 ms long natively: fewer, longer-paced steps at 4 ranks keep the
//! native oracle short.) `ckpt-files=a,b` names the files (relative to the scratch directory)
//! the program keeps open through checkpoints, for the restart-errors mode.

use crate::error::Error;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Replaced in `args`/`long-args` by the job's scratch directory.
pub const TMPDIR_PLACEHOLDER: &str = "{tmpdir}";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestSpec {
    /// File stem, e.g. `p2p_blocking`; also the binary's name.
    pub name: String,
    pub source: PathBuf,
    pub ranks: Vec<u32>,
    /// Arguments of a normal (short) run.
    pub args: Vec<String>,
    /// Arguments for modes that need the program to run for seconds (checkpoints); `None` when
    /// the test has no long form.
    pub long_args: Option<Vec<String>>,
    /// `long-args.N`: the long form for N ranks, where it differs.
    pub long_args_for: BTreeMap<u32, Vec<String>>,
    /// Per-job limit overriding the harness default.
    pub timeout: Option<Duration>,
    /// `ckpt-ranks`: rank counts of the checkpoint modes; empty: not in the checkpoint matrix.
    pub ckpt_ranks: Vec<u32>,
    /// `ckpt-modes`: names of the checkpoint modes this test runs in (validated by the
    /// harness, which knows the modes).
    pub ckpt_modes: Vec<String>,
    /// `ckpt-pace`: microseconds of sleep per step in the checkpoint modes.
    pub ckpt_pace_us: u64,
    /// `ckpt-pace.N`: the pace for N ranks, where it differs.
    pub ckpt_pace_for: BTreeMap<u32, u64>,
    /// `ckpt-files`: files the program keeps open through checkpoints, named relative to its
    /// scratch directory: the restart-errors mode also removes and truncates each before a
    /// restart, which must then fail naming it.
    pub ckpt_files: Vec<String>,
}

impl TestSpec {
    /// The pace of the checkpoint modes at `ranks` ranks, in microseconds per step.
    pub fn ckpt_pace(&self, ranks: u32) -> u64 {
        self.ckpt_pace_for.get(&ranks).copied().unwrap_or(self.ckpt_pace_us)
    }
}

/// Sleep per step in the checkpoint modes when a test does not say (`ckpt-pace`).
pub const DEFAULT_CKPT_PACE_US: u64 = 1000;

/// The checkpoint modes of a test with `ckpt-ranks` but no `ckpt-modes`.
pub const DEFAULT_CKPT_MODES: [&str; 4] = ["continue", "stop-restart", "older-epoch", "restart-twice"];

/// Parses the metadata of one test source. `name` is used in error messages and as the name.
pub fn parse(name: &str, source: &Path, text: &str) -> Result<TestSpec, Error> {
    const MARK: &str = "mpicr-test:";
    // Only the leading comment counts: the marker must appear before any code.
    let text = text.trim_start();
    let head_end = match text.find("*/") {
        Some(end) if text.starts_with("/*") => end,
        _ => return Err(Error::Invalid(format!("{name}: the file does not start with a comment"))),
    };
    let head = &text[..head_end];
    let at = head.find(MARK).ok_or_else(|| Error::Invalid(format!("{name}: no `{MARK}` line in the leading comment")))?;
    let line = head[at + MARK.len()..].lines().next().unwrap_or("");

    let mut spec = TestSpec {
        name: name.to_string(),
        source: source.to_path_buf(),
        ranks: Vec::new(),
        args: Vec::new(),
        long_args: None,
        long_args_for: BTreeMap::new(),
        timeout: None,
        ckpt_ranks: Vec::new(),
        ckpt_modes: Vec::new(),
        ckpt_pace_us: DEFAULT_CKPT_PACE_US,
        ckpt_pace_for: BTreeMap::new(),
        ckpt_files: Vec::new(),
    };
    let mut ckpt_modes = None;
    for field in line.split_whitespace() {
        let (key, value) = field.split_once('=').ok_or_else(|| Error::Invalid(format!("{name}: `{field}` is not key=value")))?;
        let list = || -> Vec<String> { value.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect() };
        let ranks = || -> Result<Vec<u32>, Error> {
            value
                .split(',')
                .map(|r| match r.parse::<u32>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(Error::Invalid(format!("{name}: bad rank count `{r}`"))),
                })
                .collect()
        };
        match key {
            "ranks" => spec.ranks = ranks()?,
            "ckpt-ranks" => spec.ckpt_ranks = ranks()?,
            "ckpt-modes" => ckpt_modes = Some(list()),
            "ckpt-files" => spec.ckpt_files = list(),
            k if k == "ckpt-pace" || k.starts_with("ckpt-pace.") => {
                let us = match value.parse() {
                    Ok(us) if us > 0 => us,
                    _ => return Err(Error::Invalid(format!("{name}: bad {k} `{value}`"))),
                };
                match k.strip_prefix("ckpt-pace.") {
                    None => spec.ckpt_pace_us = us,
                    Some(n) => {
                        let n = n.parse::<u32>().map_err(|_| Error::Invalid(format!("{name}: bad key `{k}`")))?;
                        spec.ckpt_pace_for.insert(n, us);
                    }
                }
            }
            "args" => spec.args = list(),
            "long-args" => spec.long_args = Some(list()),
            k if k.starts_with("long-args.") => {
                let n = k["long-args.".len()..].parse::<u32>().map_err(|_| Error::Invalid(format!("{name}: bad key `{k}`")))?;
                spec.long_args_for.insert(n, list());
            }
            "timeout" => {
                let s: u64 = value.parse().map_err(|_| Error::Invalid(format!("{name}: bad timeout `{value}`")))?;
                spec.timeout = Some(Duration::from_secs(s));
            }
            _ => return Err(Error::Invalid(format!("{name}: unknown key `{key}`"))),
        }
    }
    if spec.ranks.is_empty() {
        return Err(Error::Invalid(format!("{name}: `ranks=` is missing")));
    }
    if !spec.long_args_for.is_empty() && spec.long_args.is_none() {
        return Err(Error::Invalid(format!("{name}: `long-args.N` needs a default `long-args`")));
    }
    if !spec.ckpt_ranks.is_empty() {
        // the checkpoint modes pause at steps chosen from the step count
        let long = spec.long_args.iter().chain(spec.long_args_for.values());
        for args in long {
            if args.first().and_then(|a| a.parse::<u64>().ok()).is_none_or(|n| n < 10) {
                return Err(Error::Invalid(format!("{name}: `ckpt-ranks` needs long-args whose first value is the step count (at least 10)")));
            }
        }
        if spec.long_args.is_none() {
            return Err(Error::Invalid(format!("{name}: `ckpt-ranks` needs `long-args`")));
        }
    }
    if !spec.ckpt_files.is_empty() && spec.ckpt_ranks.is_empty() {
        return Err(Error::Invalid(format!("{name}: `ckpt-files` needs `ckpt-ranks`")));
    }
    if let Some(f) = spec.ckpt_files.iter().find(|f| f.contains('/') || f.starts_with('.')) {
        return Err(Error::Invalid(format!("{name}: `ckpt-files` names `{f}`, not a plain file name in the scratch directory")));
    }
    match ckpt_modes {
        Some(_) if spec.ckpt_ranks.is_empty() => return Err(Error::Invalid(format!("{name}: `ckpt-modes` needs `ckpt-ranks`"))),
        Some(m) => spec.ckpt_modes = m,
        None if !spec.ckpt_ranks.is_empty() => spec.ckpt_modes = DEFAULT_CKPT_MODES.iter().map(|m| m.to_string()).collect(),
        None => {}
    }
    Ok(spec)
}

/// Every `*.c` in `dir`, sorted by name. A source without valid metadata is an error rather
/// than a silent omission.
pub fn discover(dir: &Path) -> Result<Vec<TestSpec>, Error> {
    let entries = fs::read_dir(dir).map_err(Error::io("read", &dir))?;
    let mut sources: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "c")).collect();
    sources.sort();
    sources
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(path).map_err(Error::io("read", &path))?;
            parse(&name, path, &text)
        })
        .collect()
}

/// `args` with the scratch directory substituted.
pub fn expand_args(args: &[String], tmpdir: &Path) -> Vec<String> {
    let dir = tmpdir.to_string_lossy();
    args.iter().map(|a| a.replace(TMPDIR_PLACEHOLDER, &dir)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<TestSpec, Error> {
        parse("t", Path::new("t.c"), text)
    }

    #[test]
    fn full_header() {
        let s = p("/* mpicr-test: ranks=1,2,4 args=10,{tmpdir} long-args=1000 long-args.4=30 timeout=90\n * x */\nint main;").unwrap();
        assert_eq!(s.long_args_for.get(&4), Some(&vec!["30".to_string()]));
        assert_eq!(s.long_args_for.get(&2), None);
        assert_eq!(s.ranks, vec![1, 2, 4]);
        assert_eq!(s.args, vec!["10", "{tmpdir}"]);
        assert_eq!(s.long_args, Some(vec!["1000".to_string()]));
        assert_eq!(s.timeout, Some(Duration::from_secs(90)));
    }

    #[test]
    fn header_on_later_comment_line() {
        let s = p("/* Blocking p2p.\n * mpicr-test: ranks=2\n */").unwrap();
        assert_eq!(s.ranks, vec![2]);
        assert!(s.args.is_empty());
        assert_eq!(s.long_args, None);
    }

    #[test]
    fn errors() {
        assert!(p("int x; /* mpicr-test: ranks=1 */").is_err()); // not in the leading comment
        assert!(p("/* mpicr-test: args=1 */").unwrap_err().to_string().contains("ranks"));
        assert!(p("/* mpicr-test: ranks=1 rank=2 */").unwrap_err().to_string().contains("unknown key"));
        assert!(p("/* mpicr-test: ranks=0 */").is_err());
        assert!(p("/* mpicr-test: ranks=1 timeout=x */").is_err());
        assert!(p("/* mpicr-test: ranks=1 long-args.x=1 long-args=2 */").is_err());
        assert!(p("/* mpicr-test: ranks=1 long-args.1=1 */").is_err());
    }

    #[test]
    fn checkpoint_keys() {
        let s = p("/* mpicr-test: ranks=1,2,4 long-args=500 long-args.4=300 ckpt-ranks=2,4 */").unwrap();
        assert_eq!(s.ckpt_ranks, vec![2, 4]);
        assert_eq!(s.ckpt_modes, DEFAULT_CKPT_MODES.to_vec());
        let s = p("/* mpicr-test: ranks=2 long-args=500 ckpt-ranks=2 ckpt-modes=continue */").unwrap();
        assert_eq!(s.ckpt_modes, vec!["continue"]);
        assert!(p("/* mpicr-test: ranks=2 long-args=500 ckpt-modes=continue */").unwrap_err().to_string().contains("needs `ckpt-ranks`"));
        assert!(p("/* mpicr-test: ranks=2 ckpt-ranks=2 */").is_err()); // no long-args
        assert!(p("/* mpicr-test: ranks=2 long-args={tmpdir} ckpt-ranks=2 */").is_err());
        assert!(p("/* mpicr-test: ranks=2 long-args=500 long-args.4=x ckpt-ranks=2 */").is_err());
        assert!(p("/* mpicr-test: ranks=2 long-args=500 ckpt-ranks=0 */").is_err());
        assert!(p("/* mpicr-test: ranks=2 */").unwrap().ckpt_modes.is_empty());
        let s = p("/* mpicr-test: ranks=4 long-args=400 ckpt-ranks=4 ckpt-pace=5000 */").unwrap();
        assert_eq!(s.ckpt_pace_us, 5000);
        assert_eq!(p("/* mpicr-test: ranks=4 */").unwrap().ckpt_pace_us, DEFAULT_CKPT_PACE_US);
        assert!(p("/* mpicr-test: ranks=4 long-args=400 ckpt-ranks=4 ckpt-pace=0 */").is_err());
        let s = p("/* mpicr-test: ranks=2,4 long-args=400 ckpt-ranks=2,4 ckpt-pace.4=9000 */").unwrap();
        assert_eq!((s.ckpt_pace(2), s.ckpt_pace(4)), (DEFAULT_CKPT_PACE_US, 9000));
        assert!(p("/* mpicr-test: ranks=4 long-args=400 ckpt-ranks=4 ckpt-pace.x=1 */").is_err());
        let s = p("/* mpicr-test: ranks=2 long-args=400 ckpt-ranks=2 ckpt-files=a.dat,b */").unwrap();
        assert_eq!(s.ckpt_files, vec!["a.dat", "b"]);
        assert!(p("/* mpicr-test: ranks=2 ckpt-files=a.dat */").unwrap_err().to_string().contains("needs `ckpt-ranks`"));
        assert!(p("/* mpicr-test: ranks=2 long-args=400 ckpt-ranks=2 ckpt-files=d/a */").is_err());
    }

    #[test]
    fn expands_tmpdir() {
        let a = expand_args(&["x{tmpdir}/f".into(), "3".into()], Path::new("/s"));
        assert_eq!(a, vec!["x/s/f", "3"]);
    }
}
