#!/usr/bin/env bash
# The long soak: the release wirelint in front of FerretDB under steady
# mixed load with connection churn for SECONDS (default 1800), RSS, open
# descriptors and analysis tables sampled each minute, then a flood of
# 4 MiB documents. Fails if memory or descriptors grow more than 10 % after
# warm-up. CI runs the same test for one minute (tests/soak.rs).
#
#   scripts/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ferretdb.sh install >/dev/null
cargo build --release --quiet --bin wirelint
WIRELINT_SOAK_BIN="$PWD/target/release/wirelint" WIRELINT_SOAK_SECONDS="${1:-1800}" \
  cargo test --quiet --test soak -- --nocapture
