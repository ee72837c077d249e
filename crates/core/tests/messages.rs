//! Event messages, condition messages and log fields are for people: no Rust `Debug`
//! formatting in them (`Some("x")`, `["a", "b"]`, `Duration` debug output). A scan of the
//! non-test code of this crate (the operator's loops): no `?field` tracing fields and no
//! `:?}` in format strings (thiserror messages, which may quote user input, excepted); of the
//! binary: no `?field` tracing fields (its CLI errors quote user input on purpose).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n != "tests.rs" && !n.ends_with("_tests.rs"))
        {
            out.push(p);
        }
    }
}

#[test]
fn no_debug_formatting_in_messages_or_log_fields() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut operator = Vec::new();
    rust_files(&root.join("src"), &mut operator);
    let mut binary = Vec::new();
    rust_files(&root.join("../../src"), &mut binary);
    assert!(operator.len() > 10 && !binary.is_empty(), "sources found");
    let files: Vec<(PathBuf, bool)> = operator
        .into_iter()
        .map(|f| (f, true))
        .chain(binary.into_iter().map(|f| (f, false)))
        .collect();
    let debug_field = regex::Regex::new(r"(= \?[A-Za-z_(])|([(,] ?\?[a-z_]+[,)])").expect("regex");
    let mut found = Vec::new();
    for (f, strict) in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut in_error_attr = false;
        for (i, line) in code.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            if t.starts_with("#[error(") {
                in_error_attr = !t.ends_with(")]");
                continue;
            }
            if in_error_attr {
                in_error_attr = !t.ends_with(")]");
                continue;
            }
            if (line.contains("tracing::") || line.contains("event")) && debug_field.is_match(line)
                || (*strict && line.contains(":?}"))
            {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Debug formatting in messages:\n{}",
        found.join("\n")
    );
}
