//! Replays every fuzz target over its corpus (fuzz/corpus/<target>/, the
//! captured driver messages in fixtures/wire/, and the crashes fixed so far
//! in fuzz/regressions/) on every `cargo test`: what the fuzzer once found
//! stays fixed. scripts/fuzz.sh grows the corpus.

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_survives_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures: Vec<PathBuf> = files(&root.join("fixtures/wire"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    assert!(
        fixtures.len() >= 20,
        "the captured messages are the seed corpus"
    );
    for (name, target) in wirelint::fuzz::TARGETS {
        let mut inputs = fixtures.clone();
        inputs.extend(files(&root.join("fuzz/corpus").join(name)));
        inputs.extend(files(&root.join("fuzz/regressions").join(name)));
        for input in &inputs {
            let data = std::fs::read(input).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(
                outcome.is_ok(),
                "fuzz target {name} panicked on {}",
                input.display()
            );
            // Every prefix too: truncation is the commonest malformation.
            for cut in [
                1,
                4,
                15,
                16,
                20,
                21,
                25,
                data.len() / 2,
                data.len().saturating_sub(1),
            ] {
                if cut < data.len() {
                    target(&data[..cut]);
                }
            }
        }
        println!("{name}: {} inputs replayed", inputs.len());
    }
}

#[test]
fn two_messages_back_to_back_are_analysed_as_request_and_reply() {
    // The analysis target splits its input at the first message boundary;
    // a captured request followed by its reply exercises pairing and rules.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wire");
    for name in [
        "node-find",
        "pymongo-insert",
        "pymongo-aggregate",
        "pymongo-getMore",
    ] {
        let mut data = std::fs::read(root.join(format!("{name}.bin"))).unwrap();
        data.extend(std::fs::read(root.join(format!("{name}.reply.bin"))).unwrap());
        wirelint::fuzz::analysis(&data);
    }
}
