//! The corpus's applications and the analysis each runs with: its folder
//! under `fixtures/realworld/` or `fixtures/requests/`, and its
//! `wirelint.toml` read as `wirelint proxy --config` reads it. Shared by
//! the tests and `benches/analysis.rs` (which includes this file alone).

use std::path::{Path, PathBuf};

/// `fixtures/` of this repository.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The folder of the corpus application `name`.
pub fn dir(name: &str) -> Option<PathBuf> {
    ["realworld", "requests"]
        .iter()
        .map(|root| fixtures().join(root).join(name))
        .find(|d| d.is_dir())
}

/// The analysis settings of the application (or scenario) in `dir`: its
/// `wirelint.toml` if it has one, with `target` ("cosmos-ru", …) as if
/// given by `--target`.
pub fn analysis(dir: &Path, target: Option<&str>) -> wirelint::analysis::Settings {
    let config = dir.join("wirelint.toml");
    let args = wirelint::config::ProxyArgs {
        config: config.exists().then_some(config),
        target: target.map(str::to_owned),
        ..Default::default()
    };
    args.analysis_settings()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}
