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
