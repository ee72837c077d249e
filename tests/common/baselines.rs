//! The benchmark figures the docs quote, and the committed summaries behind them.
//!
//! - **Scope**: every Markdown table of README.md's `## Performance` section and of
//!   docs/performance.md.
//! - **Figures**: the numbers in a table's body cells, the first column (the row's name)
//!   excepted; a number inside a word (`p99`, `v1.15.0`, `E2E_LABEL=jem1`) is not one.
//! - **Sources**: a table names the summaries it comes from on a line
//!   `<!-- baseline: FILE... -->` right above it (blank lines between allowed); a row may name
//!   its own in its first cell (`karpenter-capi-1000.json`). FILE is a path under
//!   `hack/bench/baseline/`, where the bench scripts write their summaries.
//! - **Backed**: a figure is backed when one of its sources shows it: a `.json` number rounded
//!   to the figure's decimals, or the same digits as a number of a `.md`/`.txt` file (the
//!   tables `bench-e2e compare`, `bench-hub` and `hack/bench/scheduling.sh` print).

use std::path::Path;

pub(crate) const BASELINE_DIR: &str = "hack/bench/baseline";

/// The documents whose tables are checked, with the part of each that is.
pub(crate) fn in_scope(file: &str, text: &str) -> String {
    if file != "README.md" {
        return text.to_string();
    }
    // README: the `## Performance` section only; lines outside it are blanked, so line
    // numbers stay the file's.
    let mut inside = false;
    text.lines()
        .map(|l| {
            if l.starts_with("## ") {
                inside = l == "## Performance";
            }
            if inside { l } else { "" }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The numbers of `text` (digits with an optional fraction), not inside a word.
pub(crate) fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '.';
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() || (i > 0 && word(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        if i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit() {
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
        }
        // A number followed by a letter, a digit group or a dot and more (`1.15.0`, `2x`) is
        // part of a word.
        let end = i;
        let next = chars.get(i).copied();
        let after = chars.get(i + 1).copied();
        let glued = match next {
            Some('.') => after.is_some_and(|c| c.is_alphanumeric()),
            Some(c) => c.is_alphanumeric() || c == '_',
            None => false,
        };
        if glued {
            while i < chars.len() && word(chars[i]) {
                i += 1;
            }
            continue;
        }
        out.push(chars[start..end].iter().collect());
    }
    out
}

/// Whether `figure` is one of the numbers of `source` (a file's name and text).
pub(crate) fn shows(source: &str, text: &str, figure: &str) -> bool {
    if !source.ends_with(".json") {
        return numbers(text).iter().any(|n| n == figure);
    }
    let decimals = figure.split_once('.').map_or(0, |(_, f)| f.len());
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return false;
    };
    let mut stack = vec![&value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Number(n)
                if n.as_f64()
                    .is_some_and(|x| format!("{x:.decimals$}") == figure) =>
            {
                return true;
            }
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    false
}

/// The cells of a table line (`| a | b |`), trimmed; `None` for a non-table line.
fn cells(line: &str) -> Option<Vec<String>> {
    let l = line.trim();
    let inner = l.strip_prefix('|')?.strip_suffix('|')?;
    // `\|` inside a cell is a literal bar.
    let inner = inner.replace("\\|", "\u{0}");
    Some(
        inner
            .split('|')
            .map(|c| c.replace('\u{0}', "|").trim().to_string())
            .collect(),
    )
}

/// The files named in `text` (`<name>.json`, `.md`, `.txt`, possibly `dir/<name>`), as
/// written, backticks and braces stripped.
fn named_files(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '`' | ',' | ';' | '(' | ')'))
        .map(|w| w.trim_start_matches("hack/bench/baseline/"))
        .filter(|w| w.ends_with(".json") || w.ends_with(".md") || w.ends_with(".txt"))
        .map(str::to_string)
        .collect()
}

/// Checks the figures of `text` (the document `file`) against the summaries under
/// `root/hack/bench/baseline/`; returns the problems and how many figures it found.
pub(crate) fn check(root: &Path, file: &str, text: &str) -> (Vec<String>, usize) {
    let text = in_scope(file, text);
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    let read = |name: &str| std::fs::read_to_string(root.join(BASELINE_DIR).join(name)).ok();
    let mut i = 0;
    while i < lines.len() {
        if cells(lines[i]).is_none() {
            i += 1;
            continue;
        }
        // A table: its header at i, its separator at i + 1, its body below.
        let header = i;
        let mut marker = None;
        let mut j = header;
        while j > 0 {
            j -= 1;
            let l = lines[j].trim();
            if l.is_empty() {
                continue;
            }
            if let Some(m) = l
                .strip_prefix("<!-- baseline:")
                .and_then(|m| m.strip_suffix("-->"))
            {
                marker = Some(named_files(m));
            }
            break;
        }
        i += 2;
        while i < lines.len() {
            let Some(row) = cells(lines[i]) else { break };
            let at = format!("{file}:{}", i + 1);
            let own = named_files(&row[0]);
            let sources = if own.is_empty() {
                marker.clone().unwrap_or_default()
            } else {
                own
            };
            let figures: Vec<String> = row[1..].iter().flat_map(|c| numbers(c)).collect();
            i += 1;
            if figures.is_empty() {
                continue;
            }
            checked += figures.len();
            if sources.is_empty() {
                problems.push(format!(
                    "{at}: figures {figures:?} name no summary (a `<!-- baseline: FILE -->` line above the table at line {}, or a file in the row's first cell)",
                    header + 1
                ));
                continue;
            }
            let texts: Vec<(String, String)> = sources
                .iter()
                .filter_map(|s| match read(s) {
                    Some(t) => Some((s.clone(), t)),
                    None => {
                        problems.push(format!("{at}: {BASELINE_DIR}/{s} does not exist"));
                        None
                    }
                })
                .collect();
            if texts.len() < sources.len() {
                continue;
            }
            for f in figures {
                if !texts.iter().any(|(s, t)| shows(s, t, &f)) {
                    problems.push(format!("{at}: {f} ({}) is in none of {sources:?}", row[0]));
                }
            }
        }
    }
    (problems, checked)
}
