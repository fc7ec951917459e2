#!/usr/bin/env bash
# Regenerates fixtures/captures/: the traffic of every corpus application
# (fixtures/realworld/, fixtures/requests/) as the proxy forwarded it, one
# gzipped pcapng file per application (NAME.pcapng.gz), written by
# `wirelint proxy --capture` during tests/realworld.rs (its first, tagged
# run against FerretDB on SQLite). tests/captures.rs analyses them against
# each application's expected findings; benches/analysis.rs and
# scripts/icount.sh replay them.
#
#   scripts/captures.sh              every application
#   scripts/captures.sh NAME[,NAME]  those only
#
# Needs what scripts/test.sh installs (FerretDB, the drivers, tcpdump).
# The captures hold the applications' own test data, nothing private.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/fixtures/captures
mkdir -p "$out"
if [ -n "${1:-}" ]; then export WIRELINT_REALWORLD=$1; else rm -f "$out"/*.pcapng "$out"/*.pcapng.gz; fi
WIRELINT_KEEP_CAPTURES=$out cargo test --locked --features e2e --test realworld -- --nocapture
gzip -9 -f "$out"/*.pcapng
ls -l "$out" | awk 'NR > 1 {n++; b += $5} END {printf "captures: %d files, %.1f MB in fixtures/captures/\n", n, b / 1e6}' >&2
