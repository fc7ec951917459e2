//! Replays every fuzz target over its corpus (fuzz/corpus/<target>/, the
//! captured driver messages in fixtures/wire/, the deep seeds in
//! fuzz/seeds/deep/, and the crashes fixed so far in fuzz/regressions/) on
//! every `cargo test`: what the fuzzer once found
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
        inputs.extend(files(&root.join("fuzz/seeds/deep")));
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
        let analysed = wirelint::fuzz::analysed(&data);
        // Offered alone, the request waits for a reply; followed by its
        // reply, it is answered.
        assert_eq!(analysed.unanswered_alone, 1, "{name}: {analysed:?}");
        assert_eq!(analysed.unanswered_with_reply, 0, "{name}: {analysed:?}");
        // An accepted data operation is learnt once paired (a getMore of a
        // cursor whose find was not seen has no pattern to join).
        let learnt = if name.ends_with("getMore") { 0 } else { 1 };
        assert_eq!(analysed.operations, learnt, "{name}: {analysed:?}");
    }
}

/// The deep corpus reaches the recursive walks: inputs nested about 60
/// and 190 BSON levels (documents and arrays) through every construct pass
/// the depth check (so the analysis
/// walks them, on the production stack, in every replay and fuzz run);
/// requests nested 250 deep are skipped as too deep, and counted; the
/// reply nested 250 deep is analysed (replies are not depth-checked).
#[test]
fn the_deep_corpus_reaches_the_walks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/deep");
    let deep: Vec<PathBuf> = files(&dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("deep-"))
        })
        .collect();
    assert!(deep.len() >= 39, "{} deep inputs", deep.len());
    let stats = wirelint::stats::Stats::default();
    let (mut walked, mut skipped) = (0, 0);
    for input in &deep {
        let data = bytes::Bytes::from(std::fs::read(input).unwrap());
        // A request, and in deep-reply-* its reply: the last frame is the
        // deep one.
        let len = wirelint::wire::frame::check(&data).unwrap().unwrap();
        let (direction, last) = if len < data.len() {
            (wirelint::stats::Direction::Reply, data.slice(len..))
        } else {
            (wirelint::stats::Direction::Request, data.clone())
        };
        let decoded = wirelint::analysis::decode(1, direction, &last, &stats);
        let name = input.file_name().unwrap().to_string_lossy().into_owned();
        // Replies are not depth-checked (see `analysis::MAX_NESTING`): the
        // deep reply reaches the analysis, whose walks are bounded.
        let request = direction == wirelint::stats::Direction::Request;
        if name.ends_with("-250.bin") && request {
            assert!(decoded.is_none(), "{name} should be skipped as too deep");
            skipped += 1;
        } else {
            assert!(decoded.is_some(), "{name} should reach the analysis");
            walked += 1;
        }
    }
    let too_deep = stats
        .snapshot()
        .decode_errors
        .get("too_deep")
        .copied()
        .unwrap_or(0);
    assert_eq!(too_deep, skipped);
    println!("deep corpus: {walked} inputs walked, {skipped} skipped as too deep");
}
