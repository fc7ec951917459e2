#!/usr/bin/env bash
# Runs wirelint's fuzz targets under libFuzzer (cargo-fuzz), each for a
# while, growing fuzz/corpus/<target>/ (seeded from fixtures/wire/), and
# prints executions and coverage per target. The deep seeds
# (fuzz/seeds/deep/, from fuzz/seeds/make_deep.py) are copied in too, so
# every run starts from messages nested up to the analysis's depth limit. A crash leaves its input in
# fuzz/artifacts/<target>/; once fixed, copy it to fuzz/regressions/<target>/
# so `cargo test` (tests/fuzz_corpus.rs) replays it forever.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=1800] [target ...]
#
# Uses the stable toolchain (RUSTC_BOOTSTRAP=1, no sanitizer: the library
# forbids unsafe code, so a sanitizer would watch only its dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-1800}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frame message command hello_rewrite analysis)

command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  cp -n fixtures/wire/*.bin fuzz/seeds/deep/*.bin "fuzz/corpus/$t/" 2>/dev/null || true
  echo "== $t: ${seconds}s"
  log=$(mktemp)
  cargo fuzz run --sanitizer none --release "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 2>"$log" || { tail -40 "$log"; echo "fuzz.sh: $t FAILED (input in fuzz/artifacts/$t/)"; exit 1; }
  grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb" "$log" | sed "s/^/$t /"
  grep -E "^#[0-9]+.*(DONE|pulse)" "$log" | tail -1 | sed "s/^/$t /"
  # Keep the corpus small enough to commit: only inputs that add coverage.
  cargo fuzz cmin --sanitizer none --release "$t" "fuzz/corpus/$t" >/dev/null 2>&1 || true
  echo "$t corpus: $(ls "fuzz/corpus/$t" | wc -l) inputs"
  rm -f "$log"
done
