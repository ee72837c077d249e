//! The documentation as `tests/docs.rs` reads it: the fenced blocks of `README.md` and
//! `docs/*.md` (commands of ```sh and ```console blocks, YAML of ```yaml blocks), a small
//! shell-word splitter, and the commands the demo and CI run (`hack/demo.sh` and the
//! Makefile's `test` target with its prerequisites and the scripts they run), normalised so that a documented command
//! can be looked up among them.
// Test-support module: `pub` here shares items between test files of one test crate.
#![allow(unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A fenced block: its language and its lines with their (1-based) line numbers.
#[derive(Debug, Clone)]
pub struct Block {
    pub file: String,
    pub lang: String,
    pub lines: Vec<(usize, String)>,
}

impl Block {
    /// The line of the first content line (the fence's line when empty).
    pub fn line(&self) -> usize {
        self.lines.first().map_or(0, |(n, _)| *n)
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        for (_, l) in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// A command shown in the documentation, with the output a console block shows after it.
#[derive(Debug, Clone)]
pub struct DocCommand {
    pub file: String,
    pub line: usize,
    pub text: String,
    pub output: Vec<String>,
}

impl DocCommand {
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// README.md and docs/*.md, relative to `root`, sorted.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).expect("under root").to_path_buf())
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The fenced blocks of a Markdown text (fences may be indented, as in lists).
pub fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(lang) = trimmed.strip_prefix("```") {
                    open = Some((
                        Block {
                            file: file.to_string(),
                            lang: lang.trim().to_string(),
                            lines: Vec::new(),
                        },
                        indent,
                    ));
                }
            }
            Some((block, indent)) => {
                if trimmed.starts_with("```") {
                    out.push(open.take().expect("open block").0);
                } else {
                    let line = raw.get(*indent..).unwrap_or(trimmed).to_string();
                    block.lines.push((i + 1, line));
                }
            }
        }
    }
    assert!(open.is_none(), "{file}: unterminated fenced block");
    out
}

/// The commands of a ```sh block (every non-comment line, `\` continuations joined) or of a
/// ```console block (lines starting with `$ `, followed by their output).
pub fn commands(block: &Block) -> Vec<DocCommand> {
    let console = block.lang == "console";
    let mut out: Vec<DocCommand> = Vec::new();
    let mut pending: Option<DocCommand> = None;
    for (n, line) in &block.lines {
        if let Some(cmd) = &mut pending {
            cmd.text.push(' ');
            cmd.text.push_str(line.trim());
        } else if console {
            match line.strip_prefix("$ ") {
                Some(c) => pending = Some(new_command(block, *n, c)),
                None => {
                    if let Some(last) = out.last_mut() {
                        last.output.push(line.trim_end().to_string());
                    }
                    continue;
                }
            }
        } else {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            pending = Some(new_command(block, *n, t));
        }
        let cmd = pending.as_mut().expect("pending");
        if cmd.text.ends_with('\\') {
            cmd.text.pop();
            cmd.text.truncate(cmd.text.trim_end().len());
            continue;
        }
        out.push(pending.take().expect("pending"));
    }
    out.extend(pending);
    out
}

fn new_command(block: &Block, line: usize, text: &str) -> DocCommand {
    DocCommand {
        file: block.file.clone(),
        line,
        text: text.trim().to_string(),
        output: Vec::new(),
    }
}

/// A token of a shell line: a word, or an operator that ends a simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Word(String),
    Break,
}

/// Splits a shell line into words and command breaks (`;`, `&&`, `||`, `|`, `&`, `$(`,
/// `)`); quotes are removed, redirections (`>`, `2>&1`, `< file`) dropped, a `#` starting a
/// word ends the line. Good enough for the demo and the documentation, not a shell.
pub fn tokens(line: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let mut skip_next_word = false;
    let flush = |out: &mut Vec<Token>, word: &mut String, in_word: &mut bool, skip: &mut bool| {
        if *in_word {
            if *skip {
                *skip = false;
            } else {
                out.push(Token::Word(std::mem::take(word)));
            }
        }
        word.clear();
        *in_word = false;
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => word.push(x),
                        None => return Err(format!("unclosed ' in {line:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(x) => word.push(x),
                        None => return Err(format!("unclosed \" in {line:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            ' ' | '\t' => flush(&mut out, &mut word, &mut in_word, &mut skip_next_word),
            ';' | '|' | '&' | ')' | '(' => {
                flush(&mut out, &mut word, &mut in_word, &mut skip_next_word);
                if c == '&' && chars.peek() != Some(&'&') && out.is_empty() {
                    continue;
                }
                out.push(Token::Break);
            }
            '$' if chars.peek() == Some(&'(') => {
                flush(&mut out, &mut word, &mut in_word, &mut skip_next_word);
                chars.next();
                out.push(Token::Break);
            }
            '>' | '<' => {
                // A redirection: drop a leading fd number and the target.
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                flush(&mut out, &mut word, &mut in_word, &mut skip_next_word);
                if chars.peek() == Some(&'&') {
                    chars.next();
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                } else {
                    if chars.peek() == Some(&c) {
                        chars.next();
                    }
                    while chars.peek() == Some(&' ') {
                        chars.next();
                    }
                    skip_next_word = true;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut out, &mut word, &mut in_word, &mut skip_next_word);
    Ok(out)
}

/// The simple commands of a line (split at the breaks), as words.
pub fn simple_commands(line: &str) -> Result<Vec<Vec<String>>, String> {
    let mut out = vec![Vec::new()];
    for t in tokens(line)? {
        match t {
            Token::Word(w) => out.last_mut().expect("one").push(w),
            Token::Break => out.push(Vec::new()),
        }
    }
    out.retain(|c| !c.is_empty());
    Ok(out)
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !k.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Leading `VAR=value` words (the environment of the command).
pub fn split_env(words: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let n = words.iter().take_while(|w| is_assignment(w)).count();
    let env = words[..n]
        .iter()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (env, words[n..].to_vec())
}

/// A command in the form it is compared in: no environment assignments, no `bash` in front,
/// the demo's variables and aliases resolved (`k`, `$kubectl` → `kubectl`,
/// `$target/karpenter-capi` → `karpenter-capi`, `$here/` → `hack/`, `$repo/` → ``), no
/// `--kubeconfig X` (the documentation relies on `$KUBECONFIG`).
pub fn normalize(words: &[String]) -> Vec<String> {
    let (_, mut w) = split_env(words);
    if w.first().is_some_and(|f| f == "bash" || f == "sh") {
        w.remove(0);
    }
    let mut out: Vec<String> = Vec::new();
    let mut skip = false;
    for (i, word) in w.iter().enumerate() {
        if skip {
            skip = false;
            continue;
        }
        if word == "--kubeconfig" {
            skip = true;
            continue;
        }
        if word.starts_with("--kubeconfig=") {
            continue;
        }
        let mut word = word
            .replace("$here/", "hack/")
            .replace("$repo/", "")
            .replace("${repo}/", "");
        if let Some(rest) = word.strip_prefix("./") {
            word = rest.to_string();
        }
        if i == 0 {
            if word == "k" || word == "$kubectl" || word.ends_with("/bin/kubectl") {
                word = "kubectl".into();
            } else if word.ends_with("/karpenter-capi") {
                word = "karpenter-capi".into();
            }
        }
        out.push(word);
    }
    out
}

/// A word standing for any value: `<name>`, `$VAR`, `${VAR}`.
fn placeholder(w: &str) -> bool {
    (w.starts_with('<') && w.ends_with('>')) || w.starts_with('$')
}

/// Whether a documented command is a command the demo or CI runs: word for word, where a
/// documented placeholder matches any word and a variable of the script matches any
/// argument (not the command itself, and not `"$@"`, which stands for many words).
fn same(doc: &[String], run: &[String]) -> bool {
    doc.len() == run.len()
        && doc.iter().zip(run).enumerate().all(|(i, (a, b))| {
            a == b || placeholder(a) || (i > 0 && placeholder(b) && b != "$@" && b != "$*")
        })
}

/// The commands the demo and CI run.
pub struct Corpus {
    /// Normalised simple commands of hack/demo.sh and of the CI part of the Makefile.
    commands: Vec<Vec<String>>,
    /// Makefile targets and their recipes (normalised simple commands).
    targets: BTreeMap<String, Vec<Vec<String>>>,
}

/// Lines of a script with `\` continuations joined.
fn joined_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut continued = false;
    for l in text.lines() {
        let t = l.trim();
        if continued {
            let last = out.last_mut().expect("continued line");
            last.push(' ');
            last.push_str(t);
        } else {
            out.push(t.to_string());
        }
        continued = t.ends_with('\\');
        if continued {
            out.last_mut().expect("line").pop();
        }
    }
    out
}

fn normalized_commands(line: &str) -> Vec<Vec<String>> {
    simple_commands(line)
        .unwrap_or_default()
        .iter()
        .map(|c| normalize(c))
        .filter(|c| !c.is_empty())
        .collect()
}

impl Corpus {
    pub fn load(root: &Path) -> Corpus {
        let mut commands = Vec::new();
        let demo = std::fs::read_to_string(root.join("hack/demo.sh")).expect("hack/demo.sh");
        for line in joined_lines(&demo) {
            commands.extend(normalized_commands(&line));
        }
        let makefile = std::fs::read_to_string(root.join("Makefile")).expect("Makefile");
        let mut targets: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
        let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in makefile.lines() {
            if let Some(recipe) = line.strip_prefix('\t') {
                if let Some(t) = &current {
                    targets
                        .entry(t.clone())
                        .or_default()
                        .extend(normalized_commands(recipe));
                }
            } else if let Some((name, rest)) = line.split_once(':')
                && !name.starts_with('.')
                && !name.contains(' ')
                && !name.is_empty()
            {
                current = Some(name.to_string());
                targets.entry(name.to_string()).or_default();
                deps.insert(
                    name.to_string(),
                    rest.split_whitespace().map(str::to_string).collect(),
                );
            } else if !line.trim().is_empty() {
                current = None;
            }
        }
        // CI runs `make test`: its recipe and its prerequisites'.
        let mut ci = BTreeSet::new();
        let mut todo = vec!["test".to_string()];
        while let Some(t) = todo.pop() {
            if ci.insert(t.clone()) {
                todo.extend(deps.get(&t).cloned().unwrap_or_default());
            }
        }
        let mut scripts = Vec::new();
        for t in &ci {
            let recipe = targets.get(t).cloned().unwrap_or_default();
            scripts.extend(
                recipe
                    .iter()
                    .filter_map(|c| c.first().filter(|w| w.ends_with(".sh")).cloned()),
            );
            commands.extend(recipe);
        }
        // ... and the commands of the scripts those recipes run (`hack/test.sh` runs the
        // demo and the quick benchmark).
        for script in scripts {
            if let Ok(text) = std::fs::read_to_string(root.join(&script)) {
                for line in joined_lines(&text) {
                    commands.extend(normalized_commands(&line));
                }
            }
        }
        Corpus { commands, targets }
    }

    /// Whether the demo or CI runs `words` (a documented simple command). `make T` counts
    /// when T is `test` (what CI runs) or every command of T's recipe is run by CI.
    pub fn covers(&self, words: &[String]) -> bool {
        let doc = normalize(words);
        if let [make, target] = doc.as_slice()
            && make == "make"
        {
            return target == "test"
                || self.targets.get(target).is_some_and(|recipe| {
                    !recipe.is_empty() && recipe.iter().all(|c| self.runs(c))
                });
        }
        self.runs(&doc)
    }

    fn runs(&self, doc: &[String]) -> bool {
        self.commands.iter().any(|c| same(doc, c))
    }
}
