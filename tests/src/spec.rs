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
}

/// Parses the metadata of one test source. `name` is used in error messages and as the name.
pub fn parse(name: &str, source: &Path, text: &str) -> Result<TestSpec, String> {
    const MARK: &str = "mpicr-test:";
    // Only the leading comment counts: the marker must appear before any code.
    let text = text.trim_start();
    let head_end = match text.find("*/") {
        Some(end) if text.starts_with("/*") => end,
        _ => return Err(format!("{name}: the file does not start with a comment")),
    };
    let head = &text[..head_end];
    let at = head
        .find(MARK)
        .ok_or_else(|| format!("{name}: no `{MARK}` line in the leading comment"))?;
    let line = head[at + MARK.len()..].lines().next().unwrap_or("");

    let mut spec = TestSpec {
        name: name.to_string(),
        source: source.to_path_buf(),
        ranks: Vec::new(),
        args: Vec::new(),
        long_args: None,
        long_args_for: BTreeMap::new(),
        timeout: None,
    };
    for field in line.split_whitespace() {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| format!("{name}: `{field}` is not key=value"))?;
        let list = || -> Vec<String> {
            value
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        match key {
            "ranks" => {
                spec.ranks = value
                    .split(',')
                    .map(|r| match r.parse::<u32>() {
                        Ok(n) if n > 0 => Ok(n),
                        _ => Err(format!("{name}: bad rank count `{r}`")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "args" => spec.args = list(),
            "long-args" => spec.long_args = Some(list()),
            k if k.starts_with("long-args.") => {
                let n = k["long-args.".len()..]
                    .parse::<u32>()
                    .map_err(|_| format!("{name}: bad key `{k}`"))?;
                spec.long_args_for.insert(n, list());
            }
            "timeout" => {
                let s: u64 = value
                    .parse()
                    .map_err(|_| format!("{name}: bad timeout `{value}`"))?;
                spec.timeout = Some(Duration::from_secs(s));
            }
            _ => return Err(format!("{name}: unknown key `{key}`")),
        }
    }
    if spec.ranks.is_empty() {
        return Err(format!("{name}: `ranks=` is missing"));
    }
    if !spec.long_args_for.is_empty() && spec.long_args.is_none() {
        return Err(format!("{name}: `long-args.N` needs a default `long-args`"));
    }
    Ok(spec)
}

/// Every `*.c` in `dir`, sorted by name. A source without valid metadata is an error rather
/// than a silent omission.
pub fn discover(dir: &Path) -> Result<Vec<TestSpec>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut sources: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    sources
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            parse(&name, path, &text)
        })
        .collect()
}

/// `args` with the scratch directory substituted.
pub fn expand_args(args: &[String], tmpdir: &Path) -> Vec<String> {
    let dir = tmpdir.to_string_lossy();
    args.iter()
        .map(|a| a.replace(TMPDIR_PLACEHOLDER, &dir))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<TestSpec, String> {
        parse("t", Path::new("t.c"), text)
    }

    #[test]
    fn full_header() {
        let s = p("/* mpicr-test: ranks=1,2,4 args=10,{tmpdir} long-args=1000 long-args.4=30 timeout=90\n * x */\nint main;")
            .unwrap();
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
        assert!(p("/* mpicr-test: args=1 */").unwrap_err().contains("ranks"));
        assert!(p("/* mpicr-test: ranks=1 rank=2 */")
            .unwrap_err()
            .contains("unknown key"));
        assert!(p("/* mpicr-test: ranks=0 */").is_err());
        assert!(p("/* mpicr-test: ranks=1 timeout=x */").is_err());
        assert!(p("/* mpicr-test: ranks=1 long-args.x=1 long-args=2 */").is_err());
        assert!(p("/* mpicr-test: ranks=1 long-args.1=1 */").is_err());
    }

    #[test]
    fn expands_tmpdir() {
        let a = expand_args(&["x{tmpdir}/f".into(), "3".into()], Path::new("/s"));
        assert_eq!(a, vec!["x/s/f", "3"]);
    }
}
