//! Golden files: generated text kept in the repository, so that a change to it is seen in review.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Lines of context around each change in [`line_diff`].
const CONTEXT: usize = 3;

/// Lines of diff shown at most; the rest is counted.
const MAX_DIFF_LINES: usize = 200;

/// Cells of the longest-common-subsequence table at most (16 MiB of `u32`); larger middles are
/// shown as removed, then added.
const MAX_TABLE: usize = 4 << 20;

/// Whether `EGPU_BLESS=1` is set: golden files are then written rather than compared.
pub fn blessing() -> bool {
    std::env::var_os("EGPU_BLESS").is_some_and(|v| v == "1")
}

/// Compares `generated` with the golden file at `path`.
///
/// Under `EGPU_BLESS=1` ([`blessing`]) the file is written instead (its folder created; only when
/// its text changes) and the result is `Ok`. Otherwise `Err` when the file is missing or differs,
/// with a message that names the file, shows a [`line_diff`] (golden `-`, generated `+`), says
/// where the generated text was saved (the temporary folder) and how to accept it.
pub fn compare_golden(path: &Path, generated: &str) -> Result<(), String> {
    let golden = std::fs::read_to_string(path);
    if blessing() {
        if golden.as_deref().ok() != Some(generated) {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            std::fs::write(path, generated).map_err(|e| format!("{}: {e}", path.display()))?;
            println!("EGPU_BLESS=1: wrote {}", path.display());
        }
        return Ok(());
    }
    let golden = golden.map_err(|e| format!("{}: {e} (EGPU_BLESS=1 writes it)", path.display()))?;
    if golden == generated {
        return Ok(());
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let saved_at = std::env::temp_dir().join(format!("egpu-golden-{name}"));
    let saved = match std::fs::write(&saved_at, generated) {
        Ok(()) => format!("the generated text is in {}", saved_at.display()),
        Err(e) => format!("the generated text could not be saved: {e}"),
    };
    Err(format!(
        "{} differs from the generated text ({saved}; if the change is meant, review it and run \
         with EGPU_BLESS=1):\n{}",
        path.display(),
        line_diff(&golden, generated)
    ))
}

/// Golden files of one folder checked together: [`Golden::check`] compares each (see
/// [`compare_golden`]), and [`Golden::finish`] fails once, naming every file that differs.
///
/// ```no_run
/// let mut golden = egpu_test_support::Golden::new(egpu_test_support::workspace_path("tests/golden"));
/// golden.check("answer.txt", "42\n");
/// golden.finish();
/// ```
#[derive(Debug)]
pub struct Golden {
    dir: PathBuf,
    changed: Vec<String>,
    finished: bool,
}

impl Golden {
    /// Golden files under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Golden {
        Golden { dir: dir.into(), changed: Vec::new(), finished: false }
    }

    /// Compares `generated` with file `name` of the folder, or writes it under `EGPU_BLESS=1`.
    pub fn check(&mut self, name: &str, generated: &str) {
        if let Err(e) = compare_golden(&self.dir.join(name), generated) {
            self.changed.push(e);
        }
    }

    /// Panics when a file checked differs from its generated text, with every difference.
    #[track_caller]
    pub fn finish(mut self) {
        self.finished = true;
        let changed = std::mem::take(&mut self.changed);
        assert!(
            changed.is_empty(),
            "{} golden file(s) of {} differ from the generated text:\n\n{}",
            changed.len(),
            self.dir.display(),
            changed.join("\n\n")
        );
    }
}

impl Drop for Golden {
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            panic!("Golden for {} dropped without finish()", self.dir.display());
        }
    }
}

/// One line of an edit script: kept (index in both), removed from `want`, added from `got`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Keep(usize, usize),
    Remove(usize),
    Add(usize),
}

/// A readable line diff of `want` (the golden text) and `got` (the generated one), as unified
/// diffs show it: hunks headed `@@ -line,count +line,count @@`, removed lines `-`, added lines
/// `+`, three lines of context; long diffs are cut after 200 lines. Equal texts give an empty
/// string; texts whose lines are equal say that only line endings differ.
pub fn line_diff(want: &str, got: &str) -> String {
    if want == got {
        return String::new();
    }
    let a: Vec<&str> = want.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    if a == b {
        return "the texts differ only in their line endings or final newline\n".into();
    }
    let edits = edit_script(&a, &b);
    let changed: Vec<usize> =
        (0..edits.len()).filter(|&i| !matches!(edits[i], Edit::Keep(..))).collect();
    // Hunks: changed edits and their context, merged where the contexts meet.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        let (start, end) = (i.saturating_sub(CONTEXT), (i + CONTEXT + 1).min(edits.len()));
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    let mut out = String::new();
    let mut shown = 0;
    let mut cut = 0;
    for (start, end) in hunks {
        let hunk = &edits[start..end];
        if shown >= MAX_DIFF_LINES {
            cut += hunk.iter().filter(|e| !matches!(e, Edit::Keep(..))).count();
            continue;
        }
        let a_start = hunk.iter().find_map(|e| match *e {
            Edit::Keep(i, _) | Edit::Remove(i) => Some(i),
            Edit::Add(_) => None,
        });
        let b_start = hunk.iter().find_map(|e| match *e {
            Edit::Keep(_, j) | Edit::Add(j) => Some(j),
            Edit::Remove(_) => None,
        });
        let a_len = hunk.iter().filter(|e| !matches!(e, Edit::Add(_))).count();
        let b_len = hunk.iter().filter(|e| !matches!(e, Edit::Remove(_))).count();
        let _ = writeln!(
            out,
            "@@ -{},{a_len} +{},{b_len} @@",
            a_start.map_or(0, |i| i + 1),
            b_start.map_or(0, |j| j + 1)
        );
        for edit in hunk {
            if shown >= MAX_DIFF_LINES {
                cut += usize::from(!matches!(edit, Edit::Keep(..)));
                continue;
            }
            let _ = match *edit {
                Edit::Keep(i, _) => writeln!(out, " {}", a[i]),
                Edit::Remove(i) => writeln!(out, "-{}", a[i]),
                Edit::Add(j) => writeln!(out, "+{}", b[j]),
            };
            shown += 1;
        }
    }
    if cut > 0 {
        let _ = writeln!(out, "… and {cut} more changed lines");
    }
    out
}

/// The edits from `a` to `b`: the common start and end kept, the middle by longest common
/// subsequence (or removed then added, when too large for the table).
fn edit_script(a: &[&str], b: &[&str]) -> Vec<Edit> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix =
        a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut edits: Vec<Edit> = (0..prefix).map(|i| Edit::Keep(i, i)).collect();
    let (n, m) = (am.len(), bm.len());
    if (n + 1).saturating_mul(m + 1) <= MAX_TABLE {
        // lcs[i * (m + 1) + j]: the longest common subsequence of am[i..] and bm[j..].
        let width = m + 1;
        let mut lcs = vec![0u32; (n + 1) * width];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * width + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * width + j + 1] + 1
                } else {
                    lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                edits.push(Edit::Keep(prefix + i, prefix + j));
                (i, j) = (i + 1, j + 1);
            } else if j == m || (i < n && lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
                edits.push(Edit::Remove(prefix + i));
                i += 1;
            } else {
                edits.push(Edit::Add(prefix + j));
                j += 1;
            }
        }
    } else {
        edits.extend((0..n).map(|i| Edit::Remove(prefix + i)));
        edits.extend((0..m).map(|j| Edit::Add(prefix + j)));
    }
    edits.extend((0..suffix).map(|k| Edit::Keep(a.len() - suffix + k, b.len() - suffix + k)));
    edits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(line_diff("a\nb\n", "a\nb\n"), "");
    }

    #[test]
    fn a_changed_line_is_shown_with_its_context() {
        let want = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let got = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(line_diff(want, got), "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
    }

    #[test]
    fn insertions_and_removals_at_the_ends() {
        assert_eq!(line_diff("a\n", "a\nb\n"), "@@ -1,1 +1,2 @@\n a\n+b\n");
        assert_eq!(line_diff("x\na\n", "a\n"), "@@ -1,2 +1,1 @@\n-x\n a\n");
        assert_eq!(line_diff("", "a\n"), "@@ -0,0 +1,1 @@\n+a\n");
    }

    #[test]
    fn distant_changes_make_two_hunks() {
        let want: String = (0..20).map(|i| format!("{i}\n")).collect();
        let got = want.replace("2\n", "two\n").replace("17\n", "seventeen\n");
        let diff = line_diff(&want, &got);
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
        assert!(diff.contains("-2\n+two\n") && diff.contains("-17\n+seventeen\n"), "{diff}");
    }

    #[test]
    fn line_endings_alone_are_named() {
        assert!(line_diff("a\nb", "a\r\nb\n").contains("line endings"));
    }

    #[test]
    fn long_diffs_are_cut() {
        let want: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let got: String = (0..1000).map(|i| format!("x{i}\n")).collect();
        let diff = line_diff(&want, &got);
        assert!(diff.lines().count() <= MAX_DIFF_LINES + 2, "{}", diff.lines().count());
        assert!(diff.ends_with("… and 1800 more changed lines\n"), "{}", &diff[diff.len() - 60..]);
    }

    #[test]
    fn edits_rebuild_both_texts() {
        let a = ["a", "b", "c", "d", "e", "b"];
        let b = ["b", "x", "c", "e", "b", "y"];
        let edits = edit_script(&a, &b);
        let from_a: Vec<usize> = edits
            .iter()
            .filter_map(|e| match *e {
                Edit::Keep(i, _) | Edit::Remove(i) => Some(i),
                Edit::Add(_) => None,
            })
            .collect();
        let from_b: Vec<usize> = edits
            .iter()
            .filter_map(|e| match *e {
                Edit::Keep(_, j) | Edit::Add(j) => Some(j),
                Edit::Remove(_) => None,
            })
            .collect();
        assert_eq!(from_a, (0..a.len()).collect::<Vec<_>>());
        assert_eq!(from_b, (0..b.len()).collect::<Vec<_>>());
        assert_eq!(edits.iter().filter(|e| matches!(e, Edit::Keep(..))).count(), 4);
    }

    #[test]
    fn a_golden_file_is_compared_and_a_missing_one_named() {
        let dir = std::env::temp_dir().join(format!("egpu-test-support-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let path = dir.join("same.txt");
        std::fs::write(&path, "one\ntwo\n").expect("write");
        if !blessing() {
            assert_eq!(compare_golden(&path, "one\ntwo\n"), Ok(()));
            let e = compare_golden(&path, "one\n2\n").expect_err("differs");
            assert!(e.contains("-two\n+2\n") && e.contains("EGPU_BLESS=1"), "{e}");
            let e = compare_golden(&dir.join("missing.txt"), "x").expect_err("missing");
            assert!(e.contains("missing.txt") && e.contains("EGPU_BLESS=1 writes it"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
