//! The layering of `src/`: a top-level module may import only modules at or
//! below its own place in the order `docs/architecture.md` declares. The
//! test reads the list from the document and every `crate::…` path from the
//! code, so a change to either is checked against the other; there is no
//! exception list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The declared order, lowest first: the numbered list under the
/// "## Layers" heading of docs/architecture.md (`1. \`wire\` — …`).
fn declared_layers(doc: &str) -> Vec<String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/architecture.md has a \"## Layers\" section");
    section
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.trim().split_once(". `")?;
            number.parse::<u32>().ok()?;
            Some(rest.split('`').next()?.to_string())
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a file's code names through `crate::`, with the
/// line of the first mention (comments are not code and are skipped).
fn imports(text: &str) -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" //").next().unwrap_or(code);
        for (i, _) in code.match_indices("crate::") {
            if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `mycrate::`, not a path from this crate's root
            }
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                for part in group.split(['}', ',']) {
                    let name: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        found.entry(name).or_insert(n + 1);
                    }
                }
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.entry(name).or_insert(n + 1);
        }
    }
    found
}

#[test]
fn no_module_imports_one_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let layers = declared_layers(&doc);
    assert!(layers.len() >= 8, "layers read from the doc: {layers:?}");
    let rank = |m: &str| layers.iter().position(|l| l == m);

    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut undeclared = Vec::new();
    let mut modules_seen = std::collections::BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        modules_seen.insert(module.clone());
        let Some(own) = rank(&module) else {
            undeclared.push(module);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (imported, line) in imports(&text) {
            match rank(&imported) {
                Some(r) if r > own => violations.push(format!(
                    "src/{}:{line}: `{module}` (layer {}) imports `crate::{imported}` (layer {}), which is above it",
                    relative.display(),
                    own + 1,
                    r + 1
                )),
                Some(_) => {}
                // Items of the crate root (re-exports) are not layers.
                None if root.join("src").join(format!("{imported}.rs")).exists()
                    || root.join("src").join(&imported).is_dir() =>
                {
                    undeclared.push(imported)
                }
                None => {}
            }
        }
    }
    undeclared.sort();
    undeclared.dedup();
    assert!(
        undeclared.is_empty(),
        "modules missing from the Layers list of docs/architecture.md: {undeclared:?}"
    );
    let declared_but_absent: Vec<&String> = layers
        .iter()
        .filter(|l| !modules_seen.contains(*l))
        .collect();
    assert!(
        declared_but_absent.is_empty(),
        "docs/architecture.md lists layers that src/ does not have: {declared_but_absent:?}"
    );
    assert!(
        violations.is_empty(),
        "imports against the layering:\n{}",
        violations.join("\n")
    );
}

/// The checker itself: an upward import in a sample is caught, a comment
/// and a foreign crate's path are not imports.
#[test]
fn the_checker_sees_imports_and_skips_comments() {
    let sample = "use crate::rules::all;\n// see crate::app\nlet x = mycrate::thing;\nuse crate::{wire, stats::Direction};\n";
    let found: Vec<String> = imports(sample).into_keys().collect();
    assert_eq!(found, vec!["rules", "stats", "wire"]);
    let layers =
        declared_layers("# t\n\n## Layers\n\n1. `wire` — a\n2. `proxy` — b\n\n## Next\n3. `x`\n");
    assert_eq!(layers, vec!["wire", "proxy"]);
}

/// A file's module path under `src/` (`analysis/command/mod.rs` →
/// `["analysis", "command"]`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The module paths a file's code names (`crate::…`, `super::…`,
/// `self::…`, with `use` groups opened one level), resolved from `own`,
/// the file's module path. The file's unit tests are left out: only code
/// after the first `#[cfg(test)]` may name its own module through `super`.
fn referenced_paths(text: &str, own: &[String]) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // The segments of the path: `super::super::a::b` → base, [a, b].
            let mut rest = &code[i..];
            let mut base: Vec<String> = Vec::new();
            loop {
                if let Some(r) = rest.strip_prefix("crate::") {
                    base.clear();
                    rest = r;
                } else if let Some(r) = rest.strip_prefix("super::") {
                    if base.is_empty() {
                        base = own.to_vec();
                    }
                    base.pop();
                    rest = r;
                } else if let Some(r) = rest.strip_prefix("self::") {
                    if base.is_empty() {
                        base = own.to_vec();
                    }
                    rest = r;
                } else {
                    break;
                }
            }
            let mut path = base;
            loop {
                let name = ident(rest);
                if name.is_empty() {
                    break;
                }
                rest = &rest[name.len()..];
                path.push(name);
                match rest.strip_prefix("::") {
                    Some(r) => rest = r,
                    None => break,
                }
            }
            if let Some(group) = rest.strip_prefix('{') {
                // The first name of each element of the group.
                let mut depth = 0;
                let mut element_start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => element_start = true,
                        c if element_start && depth == 0 && !c.is_whitespace() => {
                            element_start = false;
                            let name = ident(&group[j..]);
                            if !name.is_empty() && name != "self" {
                                let mut p = path.clone();
                                p.push(name);
                                found.push(p);
                            }
                        }
                        _ => {}
                    }
                }
            }
            found.push(path);
        }
    }
    found
}

/// No module in `src/` imports a sibling that imports it back: between two
/// modules of one folder, names go one way. A circle means one concept is
/// split across two files, or a shared piece lives in the wrong home.
#[test]
fn no_sibling_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let is_module = |path: &[String]| {
        let joined = path.join("/");
        src.join(format!("{joined}.rs")).exists() || src.join(&joined).join("mod.rs").exists()
    };
    // Modules declared `#[cfg(test)] mod name;`: unit tests, left out like
    // the test modules inside a file.
    let mut test_only = std::collections::BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let next = lines.next().unwrap_or("");
            let name = next
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub(crate) ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let Some(name) = name {
                // `a/mod.rs` and `a/b.rs` declare their children in `a/`
                // and `a/b/`; `lib.rs`, the crate's top level.
                let mut path = match relative == Path::new("lib.rs") {
                    true => Vec::new(),
                    false => module_path(relative),
                };
                path.push(name.to_string());
                test_only.insert(path);
            }
        }
    }
    // (folder, from, to): module `from` of the folder names its sibling `to`.
    let mut edges: BTreeMap<(Vec<String>, String, String), String> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let own = module_path(relative);
        if own.len() == 1 && (own[0] == "lib" || own[0] == "main") {
            continue;
        }
        if test_only.iter().any(|t| own.starts_with(t)) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for target in referenced_paths(&text, &own) {
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= own.len() || common >= target.len() {
                continue; // itself, an ancestor or its own child
            }
            if !is_module(&target[..=common]) {
                continue; // an item of the common parent, not a module
            }
            let folder = own[..common].to_vec();
            edges
                .entry((folder, own[common].clone(), target[common].clone()))
                .or_insert_with(|| relative.display().to_string());
        }
    }
    let mut circles = Vec::new();
    for ((folder, from, to), file) in &edges {
        if from < to {
            if let Some(back) = edges.get(&(folder.clone(), to.clone(), from.clone())) {
                circles.push(format!(
                    "src/{}: `{from}` and `{to}` import each other (see {file} and {back})",
                    folder.join("/")
                ));
            }
        }
    }
    assert!(
        edges.len() > 20,
        "the checker found too few imports: {edges:?}"
    );
    assert!(
        circles.is_empty(),
        "sibling modules in a circle:\n{}",
        circles.join("\n")
    );
}

/// The circle checker resolves `super`, `crate` and `use` groups.
#[test]
fn the_circle_checker_resolves_paths() {
    let own: Vec<String> = ["analysis", "budget"].map(String::from).to_vec();
    let text = "use super::{shape::fnv1a, rule::{A, B}};\nlet x = crate::wire::frame::peek();\n// super::gone\n#[cfg(test)]\nuse super::super::late;\n";
    let found: Vec<String> = referenced_paths(text, &own)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        found,
        vec![
            "wire::frame::peek",
            "analysis::shape",
            "analysis::rule",
            "analysis"
        ]
    );
}
