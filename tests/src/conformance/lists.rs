//! The hand-kept lists of `scripts/conformance/`:
//!
//! - `exclude.txt`: `FLAVOR PATTERN # reason`: tests that fail (or hang, or fail at random)
//!   natively, on that MPICH build (`mpich4`, `mpich5`, or `*`): not run at all, listed in the
//!   report with their reason. A reason is required.
//! - `known-issue14.txt`: `FLAVOR MODE PATTERN # reason`: failures of the shim (`shim`) or
//!   through a checkpoint (`continue`, `stop-restart`, `checkpoint` for both, `*` for all
//!   three) that issue 14 lists and another change is fixing: they still run and are
//!   reported, but do not fail the run; one that passes is reported so that its line can go.
//! - `ci.txt`: `PATTERN [checkpoint]`: the selection `make test` runs (`--select ci`), and
//!   which of it also runs through checkpoints.
//!
//! A PATTERN is a test id (`dir/program/npN[/args][/env]`, see `Entry::id`) or a start of one
//! that ends at a `/` (`attr/attrt` is every rank count of it).

use super::testlist::Entry;
use crate::error::Error;
use crate::Flavor;
use std::fs;
use std::path::Path;

/// Whether `pattern` selects the test `id`.
pub fn matches(pattern: &str, id: &str) -> bool {
    id == pattern || id.strip_prefix(pattern).is_some_and(|rest| rest.starts_with('/'))
}

/// A line of `exclude.txt` or `known-issue14.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// `None`: every build.
    pub flavor: Option<Flavor>,
    /// `known-issue14.txt` only: the modes it applies to.
    pub modes: Vec<String>,
    pub pattern: String,
    pub reason: String,
}

impl Listed {
    pub fn applies(&self, flavor: Flavor, id: &str) -> bool {
        self.flavor.is_none_or(|f| f == flavor) && matches(&self.pattern, id)
    }

    pub fn applies_in(&self, flavor: Flavor, mode: &str, id: &str) -> bool {
        self.applies(flavor, id) && self.modes.iter().any(|m| m == mode)
    }
}

/// The checkpoint modes of the conformance run, by name.
pub const CHECKPOINT_MODES: [&str; 2] = ["continue", "stop-restart"];

fn lines(path: &Path) -> Result<Vec<(usize, String, String)>, Error> {
    let text = fs::read_to_string(path).map_err(Error::io("read", &path))?;
    Ok(text
        .lines()
        .enumerate()
        .filter_map(|(n, l)| {
            let (body, reason) = l.split_once('#').unwrap_or((l, ""));
            let body = body.trim();
            (!body.is_empty()).then(|| (n + 1, body.to_string(), reason.trim().to_string()))
        })
        .collect())
}

fn flavor(word: &str) -> Result<Option<Flavor>, Error> {
    match word {
        "*" => Ok(None),
        w => Flavor::parse(w).map(Some).ok_or_else(|| Error::Invalid(format!("`{w}` is not mpich4, mpich5 or *"))),
    }
}

/// `exclude.txt`.
pub fn read_exclude(path: &Path) -> Result<Vec<Listed>, Error> {
    let mut out = Vec::new();
    for (n, body, reason) in lines(path)? {
        let at = |e: String| Error::Invalid(format!("{}:{n}: {e}", path.display()));
        let w: Vec<&str> = body.split_whitespace().collect();
        let [f, pattern] = w[..] else {
            return Err(at("expected FLAVOR PATTERN # reason".into()));
        };
        if reason.is_empty() {
            return Err(at("a reason is required (after #)".into()));
        }
        out.push(Listed { flavor: flavor(f).map_err(|e| at(e.to_string()))?, modes: Vec::new(), pattern: pattern.to_string(), reason });
    }
    Ok(out)
}

/// `known-issue14.txt`.
pub fn read_known(path: &Path) -> Result<Vec<Listed>, Error> {
    let mut out = Vec::new();
    for (n, body, reason) in lines(path)? {
        let at = |e: String| Error::Invalid(format!("{}:{n}: {e}", path.display()));
        let w: Vec<&str> = body.split_whitespace().collect();
        let [f, mode, pattern] = w[..] else {
            return Err(at("expected FLAVOR MODE PATTERN # reason".into()));
        };
        if reason.is_empty() {
            return Err(at("a reason is required (after #)".into()));
        }
        let modes: Vec<String> = match mode {
            "*" => ["shim", "continue", "stop-restart"].map(String::from).to_vec(),
            "checkpoint" => CHECKPOINT_MODES.map(String::from).to_vec(),
            "shim" | "continue" | "stop-restart" => vec![mode.to_string()],
            m => return Err(at(format!("`{m}` is not shim, continue, stop-restart, checkpoint or *"))),
        };
        out.push(Listed { flavor: flavor(f).map_err(|e| at(e.to_string()))?, modes, pattern: pattern.to_string(), reason });
    }
    Ok(out)
}

/// A line of `ci.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    pub pattern: String,
    pub checkpoint: bool,
}

/// `ci.txt`.
pub fn read_selection(path: &Path) -> Result<Vec<Selected>, Error> {
    let mut out = Vec::new();
    for (n, body, _) in lines(path)? {
        let w: Vec<&str> = body.split_whitespace().collect();
        let checkpoint = match w[..] {
            [_] => false,
            [_, "checkpoint"] => true,
            _ => return Err(Error::Invalid(format!("{}:{n}: expected PATTERN [checkpoint]", path.display()))),
        };
        out.push(Selected { pattern: w[0].to_string(), checkpoint });
    }
    Ok(out)
}

/// The entries a selection names, each with whether it runs through checkpoints; a pattern
/// that selects nothing is an error (a renamed test must not drop out of CI silently).
pub fn apply_selection(entries: &[Entry], selection: &[Selected]) -> Result<Vec<(Entry, bool)>, Error> {
    for s in selection {
        if !entries.iter().any(|e| matches(&s.pattern, &e.id())) {
            return Err(Error::Invalid(format!("the selection names `{}`, which is no test", s.pattern)));
        }
    }
    Ok(entries
        .iter()
        .filter_map(|e| {
            let id = e.id();
            let hits: Vec<&Selected> = selection.iter().filter(|s| matches(&s.pattern, &id)).collect();
            (!hits.is_empty()).then(|| (e.clone(), hits.iter().any(|s| s.checkpoint)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("attr/attrt", "attr/attrt/np2"));
        assert!(matches("attr/attrt/np2", "attr/attrt/np2"));
        assert!(!matches("attr/attr", "attr/attrt/np2"));
        assert!(!matches("attr/attrt/np2", "attr/attrt/np2x"));
    }

    #[test]
    fn lists() {
        let dir = std::env::temp_dir().join(format!("mpicr-lists-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("l.txt");
        fs::write(&p, "# header\nmpich4 shim attr/attrt # keyvals\n* checkpoint coll/x/np4 # slow\n").unwrap();
        let k = read_known(&p).unwrap();
        assert!(k[0].applies_in(Flavor::Mpich4, "shim", "attr/attrt/np2"));
        assert!(!k[0].applies_in(Flavor::Mpich5, "shim", "attr/attrt/np2"));
        assert!(k[1].applies_in(Flavor::Mpich5, "stop-restart", "coll/x/np4"));
        assert!(!k[1].applies_in(Flavor::Mpich5, "shim", "coll/x/np4"));
        fs::write(&p, "mpich4 shim attr/attrt\n").unwrap();
        assert!(read_known(&p).unwrap_err().to_string().contains("reason"));
        fs::write(&p, "mpich5 io/x # hangs\n").unwrap();
        assert_eq!(read_exclude(&p).unwrap()[0].flavor, Some(Flavor::Mpich5));
        fs::write(&p, "attr/attrt\ncoll/bcast checkpoint\n").unwrap();
        let s = read_selection(&p).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!((s.len(), s[1].checkpoint), (2, true));
    }
}
