//! A small line diff for failure messages: expected (the native oracle) against actual.
//!
//! Outputs are short (tens to a few thousand lines), so a quadratic LCS table is fine; above
//! `MAX_CELLS` it falls back to showing the first differing line with context.

const CONTEXT: usize = 3;
const MAX_SHOWN: usize = 40;
const MAX_CELLS: usize = 4_000_000;

/// A unified-style rendering (`-` expected only, `+` actual only, ` ` common) of the hunks that
/// differ, or `None` when the two are equal. At most `MAX_SHOWN` lines are shown.
pub fn line_diff(expected: &[u8], actual: &[u8]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let exp = String::from_utf8_lossy(expected);
    let act = String::from_utf8_lossy(actual);
    let a: Vec<&str> = exp.split_inclusive('\n').collect();
    let b: Vec<&str> = act.split_inclusive('\n').collect();
    let ops = if a.len().saturating_mul(b.len()) <= MAX_CELLS { lcs_ops(&a, &b) } else { prefix_ops(&a, &b) };
    Some(render(&ops))
}

#[derive(Debug, PartialEq)]
enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Add(&'a str),
}

fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (a.len(), b.len());
    // len[i][j]: LCS length of a[i..] and b[j..]
    let mut len = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[at(i, j)] = if a[i] == b[j] { len[at(i + 1, j + 1)] + 1 } else { len[at(i + 1, j)].max(len[at(i, j + 1)]) };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push(Op::Same(a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || len[at(i + 1, j)] >= len[at(i, j + 1)]) {
            // Deletions first, so a changed line reads "- old" then "+ new".
            ops.push(Op::Del(a[i]));
            i += 1;
        } else {
            ops.push(Op::Add(b[j]));
            j += 1;
        }
    }
    ops
}

/// Fallback for huge outputs: common prefix, then the rest of each side.
fn prefix_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let mut ops: Vec<Op> = a[..common].iter().map(|l| Op::Same(l)).collect();
    ops.extend(a[common..].iter().map(|l| Op::Del(l)));
    ops.extend(b[common..].iter().map(|l| Op::Add(l)));
    ops
}

fn render(ops: &[Op]) -> String {
    let changed: Vec<bool> = ops.iter().map(|o| !matches!(o, Op::Same(_))).collect();
    let near_change = |k: usize| {
        let lo = k.saturating_sub(CONTEXT);
        let hi = (k + CONTEXT + 1).min(ops.len());
        changed[lo..hi].iter().any(|&c| c)
    };
    let mut out = String::new();
    let (mut shown, mut skipped_gap) = (0, false);
    for (k, op) in ops.iter().enumerate() {
        if !near_change(k) {
            skipped_gap = true;
            continue;
        }
        if shown == MAX_SHOWN {
            out.push_str("  ... (diff truncated)\n");
            break;
        }
        if skipped_gap && !out.is_empty() {
            out.push_str("  ...\n");
        }
        skipped_gap = false;
        let (sign, line) = match op {
            Op::Same(l) => (' ', l),
            Op::Del(l) => ('-', l),
            Op::Add(l) => ('+', l),
        };
        out.push(sign);
        out.push(' ');
        out.push_str(line.strip_suffix('\n').unwrap_or(line));
        if !line.ends_with('\n') {
            out.push_str("  (no newline at end)");
        }
        out.push('\n');
        shown += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_is_none() {
        assert_eq!(line_diff(b"a\nb\n", b"a\nb\n"), None);
    }

    #[test]
    fn changed_line_with_context() {
        let d = line_diff(b"1\n2\n3\n4\n5\n6\n7\n8\n9\n", b"1\n2\n3\n4\nX\n6\n7\n8\n9\n").unwrap();
        assert_eq!(d, "  2\n  3\n  4\n- 5\n+ X\n  6\n  7\n  8\n");
    }

    #[test]
    fn missing_tail_and_newline() {
        let d = line_diff(b"a\nb\nc\n", b"a\nb").unwrap();
        assert!(d.contains("- b\n"), "{d}");
        assert!(d.contains("+ b  (no newline at end)\n"), "{d}");
        assert!(d.contains("- c\n"), "{d}");
    }

    #[test]
    fn truncates() {
        let a: String = (0..100).map(|i| format!("{i}\n")).collect();
        let d = line_diff(a.as_bytes(), b"").unwrap();
        assert!(d.ends_with("(diff truncated)\n"));
        assert_eq!(d.lines().count(), MAX_SHOWN + 1);
    }
}
