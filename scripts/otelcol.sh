#!/usr/bin/env bash
# The OpenTelemetry Collector of the OTLP end-to-end test (tests/otlp.rs):
# the Go program in tests/otelcol (core OTLP receiver and contrib file
# exporter, collector release v0.161.0), built from the Go module proxy,
# pinned by its go.sum, and cached.
#
#   scripts/otelcol.sh install   build it if missing (prints only errors)
#   scripts/otelcol.sh path      print the binary's path (exit 1 if not built)
#
# Cache: $WIRELINT_CACHE (default ~/.cache/wirelint), keyed by the hash of
# tests/otelcol's go.mod, go.sum and main.go: a change of versions or
# components builds a new one.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/tests/otelcol
CACHE=${WIRELINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wirelint}
KEY=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-16)
BIN=$CACHE/otelcol-$KEY/otelcol

die() { echo "otelcol.sh: $*" >&2; exit 1; }

install() {
  [ -x "$BIN" ] && return
  command -v go >/dev/null || die "Go is needed to build the OpenTelemetry Collector"
  mkdir -p "$CACHE"
  # One build at a time (parallel test binaries may all ask for it).
  exec 9>"$CACHE/.otelcol.lock"
  flock 9
  [ -x "$BIN" ] && return
  mkdir -p "$(dirname "$BIN")"
  local log
  log=$(mktemp)
  if ! (cd "$SRC" && GOFLAGS=-mod=readonly go build -trimpath -o "$BIN.tmp" .) >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log" "$BIN.tmp"
    die "go build failed (output above)"
  fi
  rm -f "$log"
  mv "$BIN.tmp" "$BIN"
}

case "${1:-}" in
  install) install ;;
  path) [ -x "$BIN" ] && echo "$BIN" || die "not built yet: run scripts/otelcol.sh install" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
