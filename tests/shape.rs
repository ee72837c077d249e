//! The shape of the workspace's code, as CI checks it (issue 23):
//! - no module cycle inside a crate: the edges are the `crate::…` / `super::…` paths from one
//!   module (file) of a crate to another, in `use` trees, in code and in macro arguments,
//!   test code left out (`#[cfg(test)]` items, `#[test]` functions, `tests.rs` /
//!   `*_tests.rs` files and the files of `#[cfg(test)] mod x;`); a path counts for the
//!   longest module prefix it names (never the crate root), as `../shared/tools/shape.py` does;
//! - no function outside tests (free, in `impl` and `trait` blocks, nested) longer than
//!   [`MAX_LINES`] lines, from its `fn` line to its closing brace;
//! - no folder knot (issue 36): the same graph with every module folded into its crate's
//!   top-level module (`a/x.rs` and `a/y/z.rs` are `a`), so that each top-level module could
//!   become a crate of its own.
//!
//! Offenders are printed with file and line. `SHAPE_DOT=FILE` with the ignored test
//! `write_module_graph_dot` writes the module graph as Graphviz DOT (`hack/modgraph.sh`).
//!
//! The checker itself is tested on small sources here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::{self, Visit};

/// The longest a non-test function may be.
const MAX_LINES: usize = 100;

type Module = Vec<String>;

fn module_name(m: &Module) -> String {
    if m.is_empty() {
        "(root)".into()
    } else {
        m.join("::")
    }
}

/// A reference from a module to a path starting with `crate` or `super`.
#[derive(Debug)]
struct Ref {
    /// The module the path is written in (inline modules included).
    from: Module,
    segments: Vec<String>,
    line: usize,
}

/// A function and where it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LongFn {
    lines: usize,
    file: String,
    line: usize,
    name: String,
}

/// One file's findings.
#[derive(Default)]
struct Scan {
    module: Module,
    inline: Vec<String>,
    refs: Vec<Ref>,
    fns: Vec<(String, usize, usize)>,
    test_mods: Vec<Module>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                let s: String = l.tokens.to_string().split_whitespace().collect();
                s == "test"
                    || (s.starts_with("all(")
                        && !s.contains("not(")
                        && s.split(['(', ')', ',']).any(|t| t == "test"))
            })
    })
}

/// `#[test]`, `#[tokio::test]` and the like, or `#[cfg(test)]`.
fn is_test_fn(attrs: &[syn::Attribute]) -> bool {
    is_cfg_test(attrs)
        || attrs
            .iter()
            .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

fn item_attrs(i: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match i {
        Const(x) => &x.attrs,
        Enum(x) => &x.attrs,
        ExternCrate(x) => &x.attrs,
        Fn(x) => &x.attrs,
        ForeignMod(x) => &x.attrs,
        Impl(x) => &x.attrs,
        Macro(x) => &x.attrs,
        Mod(x) => &x.attrs,
        Static(x) => &x.attrs,
        Struct(x) => &x.attrs,
        Trait(x) => &x.attrs,
        TraitAlias(x) => &x.attrs,
        Type(x) => &x.attrs,
        Union(x) => &x.attrs,
        Use(x) => &x.attrs,
        _ => &[],
    }
}

impl Scan {
    fn here(&self) -> Module {
        let mut m = self.module.clone();
        m.extend(self.inline.iter().cloned());
        m
    }

    fn reference(&mut self, segments: Vec<String>, line: usize) {
        if segments.len() > 1 && matches!(segments[0].as_str(), "crate" | "super") {
            let from = self.here();
            self.refs.push(Ref {
                from,
                segments,
                line,
            });
        }
    }

    fn function(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        self.fns
            .push((sig.ident.to_string(), start, end.saturating_sub(start) + 1));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut segs = prefix.clone();
                if n.ident != "self" {
                    segs.push(n.ident.to_string());
                }
                self.reference(segs, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut segs = prefix.clone();
                if r.ident != "self" {
                    segs.push(r.ident.to_string());
                }
                self.reference(segs, r.ident.span().start().line);
            }
            syn::UseTree::Glob(g) => {
                self.reference(prefix.clone(), g.star_token.span.start().line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `crate::a::b` / `super::a` sequences in a macro's tokens.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    loop {
                        match (trees.get(j), trees.get(j + 1), trees.get(j + 2)) {
                            (
                                Some(TokenTree::Punct(a)),
                                Some(TokenTree::Punct(b)),
                                Some(TokenTree::Ident(n)),
                            ) if a.as_char() == ':' && b.as_char() == ':' => {
                                segs.push(n.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    self.reference(segs, line);
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Scan {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if is_cfg_test(item_attrs(i)) {
            if let syn::Item::Mod(m) = i
                && m.content.is_none()
            {
                let mut t = self.here();
                t.push(m.ident.to_string());
                self.test_mods.push(t);
            }
            return;
        }
        visit::visit_item(self, i);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.inline.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.inline.pop();
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_fn(&f.attrs) {
            return;
        }
        self.function(&f.sig, &f.block);
        visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_fn(&f.attrs) {
            return;
        }
        self.function(&f.sig, &f.block);
        visit::visit_impl_item_fn(self, f);
    }

    fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match i {
            syn::ImplItem::Const(x) => &x.attrs,
            syn::ImplItem::Fn(x) => &x.attrs,
            syn::ImplItem::Type(x) => &x.attrs,
            syn::ImplItem::Macro(x) => &x.attrs,
            _ => &[],
        };
        if !is_cfg_test(attrs) {
            visit::visit_impl_item(self, i);
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test_fn(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.function(&f.sig, block);
        }
        visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.reference(segs, p.span().start().line);
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.macro_tokens(m.tokens.clone());
        visit::visit_macro(self, m);
    }
}

/// One source file of a crate: its path under `src/` and its text.
struct SourceFile {
    rel: String,
    text: String,
}

/// What one crate's sources show.
#[derive(Debug, Default)]
struct Shape {
    /// The crate's modules (one per file, test files left out).
    modules: BTreeSet<Module>,
    /// Module → module, with the first place (file:line) the edge is seen.
    edges: BTreeMap<Module, BTreeMap<Module, String>>,
    long: Vec<LongFn>,
}

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` are `a::b`, `lib.rs` the
/// root.
fn module_of(rel: &str) -> Module {
    let mut m: Module = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if m.last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        m.pop();
    }
    m
}

fn test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Analyses one crate: `label` names it in the output (`crates/x/src`), `files` are its
/// sources. Binaries (`src/bin/`, and `main.rs` beside a `lib.rs`) are crates of their own:
/// their functions are measured, they take no part in the module graph.
fn analyse(label: &str, files: &[SourceFile]) -> Shape {
    let has_lib = files.iter().any(|f| f.rel == "lib.rs");
    let mut scans: Vec<(String, bool, Scan)> = Vec::new();
    for f in files {
        if test_file(&f.rel) {
            continue;
        }
        let ast = syn::parse_file(&f.text)
            .unwrap_or_else(|e| panic!("{label}/{}: does not parse: {e}", f.rel));
        let in_graph = !(f.rel.starts_with("bin/") || (has_lib && f.rel == "main.rs"));
        let mut scan = Scan {
            module: module_of(&f.rel),
            ..Scan::default()
        };
        scan.visit_file(&ast);
        scans.push((f.rel.clone(), in_graph, scan));
    }
    let test_mods: BTreeSet<Module> = scans
        .iter()
        .filter(|(_, g, _)| *g)
        .flat_map(|(_, _, s)| s.test_mods.iter().cloned())
        .collect();
    let mut shape = Shape::default();
    let mut kept = Vec::new();
    for (rel, in_graph, scan) in scans {
        if in_graph && test_mods.contains(&scan.module) {
            continue;
        }
        for (name, line, lines) in &scan.fns {
            if *lines > MAX_LINES {
                shape.long.push(LongFn {
                    lines: *lines,
                    file: format!("{label}/{rel}"),
                    line: *line,
                    name: name.clone(),
                });
            }
        }
        if in_graph {
            shape.modules.insert(scan.module.clone());
            kept.push((rel, scan));
        }
    }
    for (rel, scan) in &kept {
        for r in &scan.refs {
            let mut full: Module = if r.segments[0] == "crate" {
                Vec::new()
            } else {
                r.from.clone()
            };
            let mut rest = &r.segments[..];
            if rest[0] == "crate" {
                rest = &rest[1..];
            }
            while rest.first().is_some_and(|s| s == "super") {
                full.pop();
                rest = &rest[1..];
            }
            full.extend(rest.iter().cloned());
            let target = (1..=full.len())
                .rev()
                .map(|k| full[..k].to_vec())
                .find(|t| shape.modules.contains(t));
            if let Some(t) = target
                && t != scan.module
            {
                shape
                    .edges
                    .entry(scan.module.clone())
                    .or_default()
                    .entry(t)
                    .or_insert_with(|| format!("{label}/{rel}:{}", r.line));
            }
        }
    }
    shape.long.sort_by(|a, b| b.cmp(a));
    shape
}

impl Shape {
    /// The same graph with every module folded into its top-level module (the crate root
    /// stays the root).
    fn folders(&self) -> Shape {
        let top = |m: &Module| m.iter().take(1).cloned().collect::<Module>();
        let mut folded = Shape {
            modules: self.modules.iter().map(top).collect(),
            ..Shape::default()
        };
        for (a, targets) in &self.edges {
            for (b, at) in targets {
                let (ta, tb) = (top(a), top(b));
                if ta != tb && !ta.is_empty() && !tb.is_empty() {
                    folded
                        .edges
                        .entry(ta)
                        .or_default()
                        .entry(tb)
                        .or_insert_with(|| at.clone());
                }
            }
        }
        folded
    }

    /// The strongly connected components of more than one module (Tarjan).
    fn cycles(&self) -> Vec<Vec<Module>> {
        struct T<'a> {
            g: &'a BTreeMap<Module, BTreeMap<Module, String>>,
            index: BTreeMap<&'a Module, usize>,
            low: BTreeMap<&'a Module, usize>,
            stack: Vec<&'a Module>,
            on: BTreeSet<&'a Module>,
            out: Vec<Vec<Module>>,
        }
        impl<'a> T<'a> {
            fn visit(&mut self, v: &'a Module) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on.insert(v);
                for w in self.g.get(v).into_iter().flat_map(|e| e.keys()) {
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let l = self.low[v].min(self.low[w]);
                        self.low.insert(v, l);
                    } else if self.on.contains(w) {
                        let l = self.low[v].min(self.index[w]);
                        self.low.insert(v, l);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on.remove(w);
                        comp.push(w.clone());
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        comp.sort();
                        self.out.push(comp);
                    }
                }
            }
        }
        let mut t = T {
            g: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in &self.modules {
            if !t.index.contains_key(v) {
                t.visit(v);
            }
        }
        t.out.sort();
        t.out
    }

    /// A cycle with the edges that make it and where each is seen.
    fn describe(&self, label: &str, comp: &[Module]) -> String {
        let names: Vec<String> = comp.iter().map(module_name).collect();
        let mut s = format!("cycle in {label}: {}", names.join(" <-> "));
        for a in comp {
            for (b, at) in self.edges.get(a).into_iter().flatten() {
                if comp.contains(b) {
                    s.push_str(&format!(
                        "\n  {} -> {} ({at})",
                        module_name(a),
                        module_name(b)
                    ));
                }
            }
        }
        s
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crates: `crates/*/src` and the root package's `src`, as (label, files).
fn workspace() -> Vec<(String, Vec<SourceFile>)> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<SourceFile>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry"))
            .collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if e.path().is_dir() {
                walk(&e.path(), &r, out);
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(e.path()).expect("readable");
                out.push(SourceFile { rel: r, text });
            }
        }
    }
    let root = root();
    let mut dirs: Vec<String> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|c| root.join("crates").join(c).join("src").is_dir())
        .map(|c| format!("crates/{c}/src"))
        .collect();
    dirs.sort();
    dirs.push("src".into());
    dirs.into_iter()
        .map(|d| {
            let mut files = Vec::new();
            walk(&root.join(&d), "", &mut files);
            (d, files)
        })
        .collect()
}

fn workspace_shapes() -> Vec<(String, Shape)> {
    workspace()
        .into_iter()
        .map(|(label, files)| {
            let shape = analyse(&label, &files);
            (label, shape)
        })
        .collect()
}

#[test]
fn no_module_cycles() {
    let mut found = Vec::new();
    for (label, shape) in workspace_shapes() {
        for comp in shape.cycles() {
            found.push(shape.describe(&label, &comp));
        }
    }
    for f in &found {
        println!("{f}");
    }
    assert!(
        found.is_empty(),
        "{} module cycles:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn no_folder_knots() {
    let mut found = Vec::new();
    for (label, shape) in workspace_shapes() {
        for comp in &shape.folders().cycles() {
            found.push(
                shape
                    .folders()
                    .describe(&label, comp)
                    .replace("cycle", "knot"),
            );
        }
    }
    assert!(
        found.is_empty(),
        "{} folder knots:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn no_function_over_100_lines() {
    let mut long: Vec<LongFn> = workspace_shapes()
        .into_iter()
        .flat_map(|(_, s)| s.long)
        .collect();
    long.sort_by(|a, b| b.cmp(a));
    let lines: Vec<String> = long
        .iter()
        .map(|f| {
            format!(
                "{}:{}: fn {} is {} lines (at most {MAX_LINES})",
                f.file, f.line, f.name, f.lines
            )
        })
        .collect();
    for l in &lines {
        println!("{l}");
    }
    assert!(
        lines.is_empty(),
        "{} functions over {MAX_LINES} lines outside tests:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

/// The module graph as Graphviz DOT: one cluster per crate, the edges of a cycle in red.
fn dot(shapes: &[(String, Shape)]) -> String {
    let mut s = String::from(
        "// The module graph of the workspace's crates: `crate::`/`super::` references between\n\
         // modules, test code left out; red edges are part of a cycle.\n\
         // Generated by hack/modgraph.sh (tests/shape.rs); do not edit.\n\
         digraph modules {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n",
    );
    for (i, (label, shape)) in shapes.iter().enumerate() {
        let cycles = shape.cycles();
        let in_cycle: BTreeSet<&Module> = cycles.iter().flatten().collect();
        let comp_of = |m: &Module| cycles.iter().position(|c| c.contains(m));
        let id = |m: &Module| format!("\"{label}:{}\"", module_name(m));
        s.push_str(&format!(
            "  subgraph cluster_{i} {{\n    label=\"{label}\";\n"
        ));
        for m in &shape.modules {
            let colour = if in_cycle.contains(m) {
                ", color=red"
            } else {
                ""
            };
            s.push_str(&format!(
                "    {} [label=\"{}\"{colour}];\n",
                id(m),
                module_name(m)
            ));
        }
        for (a, targets) in &shape.edges {
            for b in targets.keys() {
                let red = comp_of(a).is_some() && comp_of(a) == comp_of(b);
                let attr = if red { " [color=red]" } else { "" };
                s.push_str(&format!("    {} -> {}{attr};\n", id(a), id(b)));
            }
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

#[test]
#[ignore = "writes the module graph: hack/modgraph.sh"]
fn write_module_graph_dot() {
    let out = std::env::var("SHAPE_DOT").expect("SHAPE_DOT=FILE says where to write the graph");
    let shapes = workspace_shapes();
    let text = dot(&shapes);
    std::fs::write(&out, &text).unwrap_or_else(|e| panic!("{out}: {e}"));
    let edges: usize = shapes
        .iter()
        .map(|(_, s)| s.edges.values().map(BTreeMap::len).sum::<usize>())
        .sum();
    assert!(edges > 0, "no edge found in the workspace");
    println!("wrote {out}: {} crates, {edges} edges", shapes.len());
}

// ---------------------------------------------------------------------------------------
// The checker on small sources.

fn files(list: &[(&str, &str)]) -> Vec<SourceFile> {
    list.iter()
        .map(|(rel, text)| SourceFile {
            rel: rel.to_string(),
            text: text.to_string(),
        })
        .collect()
}

fn names(shape: &Shape) -> Vec<Vec<String>> {
    shape
        .cycles()
        .iter()
        .map(|c| c.iter().map(module_name).collect())
        .collect()
}

#[test]
fn finds_cycles_through_use_groups_super_paths_and_macros() {
    let shape = analyse(
        "x/src",
        &files(&[
            (
                "lib.rs",
                "pub mod a; pub mod b; pub mod c; pub mod d; pub mod e;",
            ),
            ("a.rs", "use crate::{b::B, c};\npub struct A;"),
            (
                "b.rs",
                "pub struct B;\nfn f() -> super::a::A { super::a::A }",
            ),
            ("c/mod.rs", "pub mod inner;"),
            ("c/inner.rs", "fn g() { println!(\"{:?}\", crate::d::X); }"),
            (
                "d.rs",
                "pub const X: u8 = 1;\nmod m { fn h() { super::super::c::inner::g(); } }",
            ),
            // Only test code points back at a: no cycle.
            (
                "e.rs",
                "pub fn e() {}\n#[cfg(test)]\nmod tests { use crate::a::A; }",
            ),
        ]),
    );
    assert_eq!(
        names(&shape),
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["c::inner".into(), "d".into()]
        ]
    );
    let text = shape.describe("x/src", &shape.cycles()[0]);
    assert!(text.contains("a -> b (x/src/a.rs:1)"), "{text}");
    assert!(text.contains("b -> a (x/src/b.rs:2)"), "{text}");
    assert!(!shape.edges.contains_key(&vec!["e".to_string()]));
    assert!(dot(&[("x/src".into(), shape)]).contains("\"x/src:a\" -> \"x/src:b\" [color=red];"));
}

#[test]
fn folds_modules_into_their_folders_for_knots() {
    let shape = analyse(
        "x/src",
        &files(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
            ("a/mod.rs", "pub mod x; pub mod y;"),
            ("a/x.rs", "use crate::b::B;"),
            ("a/y.rs", "pub struct Y;"),
            (
                "b.rs",
                "pub struct B; fn f() -> crate::a::y::Y { crate::a::y::Y }",
            ),
            ("c.rs", "use crate::a::x;"),
        ]),
    );
    // No module cycle: a::x -> b -> a::y. Folded, a and b are a knot; c only points in.
    assert!(shape.cycles().is_empty());
    let knots = shape.folders().cycles();
    let names: Vec<Vec<String>> = knots
        .iter()
        .map(|c| c.iter().map(module_name).collect())
        .collect();
    assert_eq!(names, vec![vec!["a".to_string(), "b".into()]]);
    // Positive control of the other side: without b's path back there is no knot.
    let straight = analyse(
        "x/src",
        &files(&[
            ("lib.rs", "pub mod a; pub mod b;"),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "pub struct B;"),
        ]),
    );
    assert!(straight.folders().cycles().is_empty());
}

#[test]
fn test_files_and_binaries_are_no_modules() {
    let shape = analyse(
        "x/src",
        &files(&[
            (
                "lib.rs",
                "pub mod a; pub mod b;\n#[cfg(test)]\nmod helpers;",
            ),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "pub struct B;"),
            ("a_tests.rs", "use crate::a;"),
            ("b/tests.rs", "use crate::a;"),
            ("helpers.rs", "use crate::a;"),
            ("main.rs", "use crate::a; fn main() {}"),
            ("bin/tool.rs", "fn main() {}"),
        ]),
    );
    assert!(names(&shape).is_empty(), "{:?}", shape.edges);
    let modules: Vec<String> = shape.modules.iter().map(module_name).collect();
    assert_eq!(modules, ["(root)", "a", "b"]);
}

fn lines_fn(name: &str, body_lines: usize) -> String {
    // `fn name() {` + body + `}`: body_lines + 2 lines.
    format!(
        "fn {name}() {{\n{}}}\n",
        "    let _x = 1;\n".repeat(body_lines)
    )
}

#[test]
fn finds_long_functions_wherever_they_are() {
    let src = format!(
        "{}{}struct S;\nimpl S {{\n    {}}}\ntrait T {{ {} }}\nfn outer() {{\n{}}}\n#[cfg(test)]\nmod tests {{ {} }}\n#[test]\n{}",
        lines_fn("exactly_100", 98),
        lines_fn("free_101", 99),
        lines_fn("method", 120),
        lines_fn("provided", 101),
        lines_fn("nested", 150),
        lines_fn("in_test_mod", 300),
        lines_fn("a_test", 300),
    );
    let shape = analyse(
        "x/src",
        &files(&[("lib.rs", &src), ("bin/t.rs", &lines_fn("main", 200))]),
    );
    let found: Vec<(String, usize, &str)> = shape
        .long
        .iter()
        .map(|f| (f.name.clone(), f.lines, f.file.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("main".to_string(), 202, "x/src/bin/t.rs"),
            ("outer".into(), 154, "x/src/lib.rs"),
            ("nested".into(), 152, "x/src/lib.rs"),
            ("method".into(), 122, "x/src/lib.rs"),
            ("provided".into(), 103, "x/src/lib.rs"),
            ("free_101".into(), 101, "x/src/lib.rs"),
        ]
    );
    let free = shape
        .long
        .iter()
        .find(|f| f.name == "free_101")
        .expect("found");
    assert_eq!(free.line, 101, "the line of its `fn`");
}
