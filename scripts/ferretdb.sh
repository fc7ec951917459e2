#!/usr/bin/env bash
# The real backend for tests and for scripts/run.sh: FerretDB v1.24.2, a
# MongoDB-compatible server, built from the Go module proxy and cached.
#
#   scripts/ferretdb.sh install           build it if missing; print the binary's path
#   scripts/ferretdb.sh path              print the binary's path (exit 1 if not built)
#   scripts/ferretdb.sh start PORT DIR [--handler sqlite|postgresql] [FERRETDB FLAGS…]
#                                         run it in the foreground on 127.0.0.1:PORT,
#                                         state and SQLite data under DIR
#
# Cache: $WIRELINT_CACHE (default ~/.cache/wirelint). Telemetry is always off.
#
# Why not `go install …/cmd/ferretdb@v1.24.2`: on this machine's module proxy
# the command fails while "loading deprecation" (403 on the module's @v/list),
# and a plain build of the module panics at start-up without
# build/version/version.txt. So: download the exact module version, write
# that file, build.
set -euo pipefail

VERSION=v1.24.2
MODULE=github.com/FerretDB/FerretDB
CACHE=${WIRELINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wirelint}
BIN=$CACHE/ferretdb-$VERSION/ferretdb

die() { echo "ferretdb.sh: $*" >&2; exit 1; }

install() {
  if [ -x "$BIN" ]; then echo "$BIN"; return; fi
  command -v go >/dev/null || die "Go is needed to build FerretDB (apt-get install golang, or see https://go.dev/doc/install)"
  mkdir -p "$CACHE"
  # One build at a time (parallel test binaries may all ask for it).
  exec 9>"$CACHE/.ferretdb.lock"
  flock 9
  if [ -x "$BIN" ]; then echo "$BIN"; return; fi
  echo "ferretdb.sh: building FerretDB $VERSION (once; cached in $CACHE)…" >&2
  local dir src
  dir=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $MODULE@$VERSION gave no source directory"
  src=$(mktemp -d "$CACHE/ferretdb-src.XXXXXX")
  cp -r "$dir/." "$src"
  chmod -R u+w "$src"
  echo "$VERSION" > "$src/build/version/version.txt"
  mkdir -p "$(dirname "$BIN")"
  (cd "$src" && go build -o "$BIN.tmp" ./cmd/ferretdb) || { rm -rf "$src"; die "go build failed (output above)"; }
  mv "$BIN.tmp" "$BIN"
  rm -rf "$src"
  # sed, not head: head leaves early, and under pipefail the SIGPIPE it
  # gives FerretDB would fail the first build.
  "$BIN" --version | sed -n 1p >&2
  echo "$BIN"
}

start() {
  [ $# -ge 2 ] || die "usage: ferretdb.sh start PORT DIR [--handler sqlite|postgresql] [FLAGS…]"
  local port=$1 dir=$2 handler=sqlite
  shift 2
  if [ "${1:-}" = "--handler" ]; then handler=$2; shift 2; fi
  install >/dev/null
  mkdir -p "$dir/data" "$dir/state"
  local args=(--listen-addr="127.0.0.1:$port" --state-dir="$dir/state" --debug-addr=127.0.0.1:0 --telemetry=disable)
  case "$handler" in
    sqlite) args+=(--handler=sqlite --sqlite-url="file:$dir/data/") ;;
    postgresql) args+=(--handler=postgresql --postgresql-url="${FERRETDB_POSTGRESQL_URL:-postgres://127.0.0.1:5432/ferretdb}") ;;
    *) die "unknown handler '$handler' (sqlite or postgresql)" ;;
  esac
  exec "$BIN" "${args[@]}" "$@"
}

case "${1:-}" in
  install) install ;;
  path) [ -x "$BIN" ] && echo "$BIN" || die "not built yet: run scripts/ferretdb.sh install" ;;
  start) shift; start "$@" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
