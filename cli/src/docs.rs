//! Man pages and shell completions, generated from the clap definition (`args.rs`): `mpicr
//! completions SHELL`, and the hidden `mpicr gen-docs --man DIR --completions DIR` that `make
//! install` runs. `mpicr.1` carries the examples, signals, environment and exit status of
//! `mpicr --help` as sections of their own; every subcommand gets its page (`mpicr-run.1`, ...).

use crate::args::{Cli, GenDocsArgs, ENVIRONMENT, EXAMPLES, EXIT_STATUS, SIGNALS};
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::path::Path;

pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "mpicr", out);
    Ok(())
}

pub fn generate(a: &GenDocsArgs) -> Result<()> {
    if let Some(dir) = &a.man {
        for p in man_pages(dir)? {
            crate::outln!("{}", p.display());
        }
    }
    if let Some(dir) = &a.completions {
        for (shell, rel) in [(Shell::Bash, "bash/mpicr"), (Shell::Zsh, "zsh/_mpicr"), (Shell::Fish, "fish/mpicr.fish")] {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap_or(dir)).with_context(|| format!("creating {}", dir.display()))?;
            let mut f = std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
            completions(shell, &mut f)?;
            crate::outln!("{}", p.display());
        }
    }
    Ok(())
}

/// Writes `mpicr.1` and `mpicr-SUB.1` for every visible subcommand into `dir`.
pub fn man_pages(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut top = Cli::command().disable_help_subcommand(true);
    top.build();
    let mut written = Vec::new();
    let mut pages = vec![(top.clone(), true)];
    pages.extend(top.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| (s.clone(), false)));
    for (cmd, is_top) in pages {
        let man = clap_mangen::Man::new(cmd.clone()).manual("mpicr").source(format!("mpicr {}", env!("CARGO_PKG_VERSION")));
        let path = dir.join(man.get_filename());
        let mut out = Vec::new();
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut out)?;
        }
        if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
            man.render_subcommands_section(&mut out)?;
        }
        if is_top {
            section(&mut out, "EXAMPLES", EXAMPLES);
            section(&mut out, "SIGNALS", SIGNALS);
            section(&mut out, "ENVIRONMENT", ENVIRONMENT);
            section(&mut out, "EXIT STATUS", EXIT_STATUS);
        } else {
            if let Some(h) = cmd.get_after_help() {
                section(&mut out, "NOTES", &h.to_string());
            }
            section(&mut out, "EXIT STATUS", EXIT_STATUS);
            section(&mut out, "SEE ALSO", "mpicr(1)");
        }
        if cmd.get_version().is_some() {
            man.render_version_section(&mut out)?;
        }
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// A section of preformatted text (`.nf`), escaped for roff.
fn section(out: &mut Vec<u8>, title: &str, text: &str) {
    let mut s = format!(".SH \"{title}\"\n.nf\n");
    for line in text.lines() {
        s.push_str(&roff_line(line));
        s.push('\n');
    }
    s.push_str(".fi\n");
    out.extend_from_slice(s.as_bytes());
}

/// One line of text as roff reads it literally: backslashes doubled, hyphens as `\-`, and a
/// leading `.` or `'` (a request) neutralised with `\&`.
fn roff_line(line: &str) -> String {
    let mut s = String::new();
    if line.starts_with('.') || line.starts_with('\'') {
        s.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => s.push_str("\\e"),
            '-' => s.push_str("\\-"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_escapes() {
        assert_eq!(roff_line(".x a-b \\n"), "\\&.x a\\-b \\en");
        assert_eq!(roff_line("'q"), "\\&'q");
    }

    #[test]
    fn a_page_per_subcommand_with_the_exit_status() {
        let dir = std::env::temp_dir().join(format!("mpicr-man-test.{}", std::process::id()));
        let pages = man_pages(&dir).unwrap();
        let names: Vec<String> = pages.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for want in ["mpicr.1", "mpicr-run.1", "mpicr-checkpoint.1", "mpicr-restart.1", "mpicr-status.1"] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("gen-docs")), "hidden commands get no page: {names:?}");
        let top = std::fs::read_to_string(dir.join("mpicr.1")).unwrap();
        assert!(top.contains(".SH \"EXIT STATUS\"") && top.contains(".SH \"ENVIRONMENT\""));
        let run = std::fs::read_to_string(dir.join("mpicr-run.1")).unwrap();
        assert!(run.contains("\n.TH mpicr-run 1 "), "{}", &run[..run.len().min(200)]);
        assert!(run.contains("\\-\\-ckpt\\-dir") && run.contains("EXIT STATUS"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
