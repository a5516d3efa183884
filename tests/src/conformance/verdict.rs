//! The verdict of one run of a program of MPICH's test suite, by the suite's own rules
//! (those of its `runtests` script): the program judges itself and says " No Errors".

use super::testlist::Judge;
use crate::error::Error;
use crate::JobOutput;

/// Ok, or the first thing that makes the run a failure, in one line.
pub fn judge(how: Judge, out: &JobOutput) -> Result<(), Error> {
    match how {
        Judge::NonZeroExit if out.status.success() => Err(Error::Check("exited with status 0 (this test must end with a non-zero status)".into())),
        Judge::NonZeroExit => Ok(()),
        Judge::NoErrors => no_errors(out),
    }
}

/// Every line any process printed (stdout, stderr, then `mpiexec`'s own output: `runtests`
/// reads them merged) is " No Errors" exactly once, or a line that is let through; and the
/// job exited with 0.
fn no_errors(out: &JobOutput) -> Result<(), Error> {
    let mut streams: Vec<(String, &[u8])> = Vec::new();
    for (r, o) in out.stdout.iter().enumerate() {
        streams.push((format!("rank {r} stdout"), o));
    }
    for (r, e) in out.stderr.iter().enumerate() {
        streams.push((format!("rank {r} stderr"), e));
    }
    streams.push(("mpiexec".into(), &out.launcher));
    let mut found = false;
    let mut first_error: Option<String> = None;
    for (from, bytes) in streams {
        for line in String::from_utf8_lossy(bytes).lines() {
            if is_no_errors(line) && !found {
                found = true;
            } else if !let_through(line) && first_error.is_none() {
                first_error = Some(format!("{from}: `{}`", clip(line)));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(Error::Check(format!("unexpected output: {e}")));
    }
    if !found {
        return Err(Error::Check(if out.status.success() {
            "exited without printing \" No Errors\"".into()
        } else {
            format!("exited with {} without printing \" No Errors\"", out.status)
        }));
    }
    if !out.status.success() {
        return Err(Error::Check(format!("printed \" No Errors\" but exited with {}", out.status)));
    }
    Ok(())
}

fn is_no_errors(line: &str) -> bool {
    matches!(line.trim(), "No Errors" | "No errors")
}

/// Lines `runtests` accepts besides " No Errors" (a second " No Errors" is not one).
fn let_through(line: &str) -> bool {
    let t = line.trim_end();
    line.contains("FORTRAN STOP") || line.trim() == "Test Passed" || t.ends_with("requesting checkpoint") || t.ends_with("checkpoint completed")
}

fn clip(line: &str) -> String {
    const MAX: usize = 160;
    if line.len() <= MAX {
        return line.to_string();
    }
    let mut end = MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::Duration;

    fn out(code: i32, stdout: &[&str], stderr: &[&str]) -> JobOutput {
        JobOutput {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.iter().map(|s| s.as_bytes().to_vec()).collect(),
            stderr: stderr.iter().map(|s| s.as_bytes().to_vec()).collect(),
            launcher: Vec::new(),
            leftovers: Vec::new(),
            stray: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn no_errors_rules() {
        let j = |o: &JobOutput| judge(Judge::NoErrors, o);
        assert!(j(&out(0, &[" No Errors\n", ""], &["", ""])).is_ok());
        assert!(j(&out(0, &["Test Passed\n No errors\n"], &[""])).is_ok());
        let e = j(&out(0, &[" No Errors\n", " No Errors\n"], &["", ""])).unwrap_err();
        assert!(e.to_string().contains("rank 1 stdout"), "{e}");
        let e = j(&out(0, &[" No Errors\n"], &["[WARNING] yaksa: 3 leaked\n"])).unwrap_err();
        assert!(e.to_string().contains("rank 0 stderr: `[WARNING] yaksa"), "{e}");
        let e = j(&out(0, &["Found 2 errors\n"], &[""])).unwrap_err();
        assert!(e.to_string().contains("Found 2 errors"), "{e}");
        assert!(j(&out(0, &[""], &[""])).unwrap_err().to_string().contains("without printing"));
        assert!(j(&out(1, &[" No Errors\n"], &[""])).unwrap_err().to_string().contains("exited with"));
        assert!(j(&out(0, &["\n No Errors\n"], &[""])).is_err(), "blank lines count");
    }

    #[test]
    fn non_zero_exit() {
        assert!(judge(Judge::NonZeroExit, &out(1, &["anything\n"], &[""])).is_ok());
        assert!(judge(Judge::NonZeroExit, &out(0, &[" No Errors\n"], &[""])).is_err());
    }
}
