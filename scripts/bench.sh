#!/usr/bin/env bash
# The proxy benchmark: direct vs through wirelint (analysis off and on), in
# one run, against an in-process memory-speed responder and FerretDB.
#
#   scripts/bench.sh [--seconds 3] [--rounds 2] [--conns 1,16,64] [--no-ferretdb]
#
# Prints a table; asserts nothing. See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin wirelint
scripts/ferretdb.sh install >/dev/null || echo "bench.sh: FerretDB unavailable; measuring the responder only" >&2
exec cargo bench --quiet --bench proxy -- "$@"
