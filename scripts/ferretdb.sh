#!/usr/bin/env bash
# The real backend for tests and for scripts/run.sh: FerretDB v1.24.2, a
# MongoDB-compatible server, built from the Go module proxy and cached.
#
#   scripts/ferretdb.sh install           build it if missing; print the binary's path
#   scripts/ferretdb.sh path              print the binary's path (exit 1 if not built)
#   scripts/ferretdb.sh start PORT DIR [--postgresql] [FERRETDB FLAGS…]
#                                         run it in the foreground on 127.0.0.1:PORT,
#                                         state and data under DIR: SQLite by
#                                         default; with --postgresql, a PostgreSQL
#                                         cluster of its own under DIR (or the one
#                                         $FERRETDB_POSTGRESQL_URL names)
#   scripts/ferretdb.sh postgresql PORT DIR
#                                         run a PostgreSQL server in the foreground
#                                         on 127.0.0.1:PORT, its cluster under DIR
#                                         (created on first use; user postgres,
#                                         trusted on loopback, no durability)
#
# PostgreSQL is Debian's server (apt-get install postgresql; scripts/test.sh
# installs it). Pick its port below the ephemeral range (32768-60999), where
# a client's outgoing connection cannot have taken it. As root, the server
# runs as the `postgres` user: PostgreSQL refuses to run as root.
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

pg_bindir() {
  local dir
  dir=$(pg_config --bindir 2>/dev/null) || true
  [ -x "$dir/initdb" ] || dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -x "$dir/initdb" ] || die "PostgreSQL's server is not installed (apt-get install postgresql)"
  echo "$dir"
}

# postgresql PORT DIR: the server in the foreground (exec: a signal to this
# process reaches PostgreSQL itself).
postgresql() {
  [ $# -eq 2 ] || die "usage: ferretdb.sh postgresql PORT DIR"
  local port=$1 dir=$2 bin as=()
  bin=$(pg_bindir)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
    chmod 700 "$dir"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    "${as[@]}" test -x "$dir" || die "the postgres user cannot reach $dir: put the cluster where it can (every parent directory needs o+x)"
  fi
  if [ ! -f "$dir/PG_VERSION" ]; then
    "${as[@]}" "$bin/initdb" --pgdata="$dir" --username=postgres --auth=trust \
      --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$dir.initdb.log" 2>&1 \
      || { cat "$dir.initdb.log" >&2; die "initdb failed (output above)"; }
  fi
  # Tests and trials only: no fsync, no unix socket, loopback only.
  exec "${as[@]}" "$bin/postgres" -D "$dir" -p "$port" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories= -c fsync=off -c synchronous_commit=off \
    -c full_page_writes=off -c max_connections=400
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  [ $# -ge 2 ] || die "usage: ferretdb.sh start PORT DIR [--postgresql] [FLAGS…]"
  local port=$1 dir=$2 handler=sqlite
  shift 2
  case "${1:-}" in
    --postgresql) handler=postgresql; shift ;;
    --handler) handler=$2; shift 2 ;;
  esac
  install >/dev/null
  mkdir -p "$dir/data" "$dir/state"
  local args=(--listen-addr="127.0.0.1:$port" --state-dir="$dir/state" --debug-addr=127.0.0.1:0 --telemetry=disable)
  case "$handler" in
    sqlite) exec "$BIN" "${args[@]}" --handler=sqlite --sqlite-url="file:$dir/data/" "$@" ;;
    postgresql) ;;
    *) die "unknown handler '$handler' (sqlite or postgresql)" ;;
  esac
  local url=${FERRETDB_POSTGRESQL_URL:-}
  pg_pid= fd_pid=
  if [ -z "$url" ]; then
    local pg_port
    pg_port=$(pick_pg_port)
    "$0" postgresql "$pg_port" "$dir/postgresql" &
    pg_pid=$!
    # Whatever ends this script ends both servers.
    trap 'kill $fd_pid $pg_pid 2>/dev/null; wait' EXIT
    trap 'exit 143' INT TERM
    local tries=0
    until "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U postgres; do
      kill -0 "$pg_pid" 2>/dev/null || die "PostgreSQL did not start"
      tries=$((tries + 1)); [ $tries -lt 300 ] || die "PostgreSQL did not answer within 30 s"
      sleep 0.1
    done
    "$(pg_bindir)/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres \
      -c "SELECT 1 FROM pg_database WHERE datname = 'ferretdb'" -t | grep -q 1 \
      || "$(pg_bindir)/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres ferretdb
    url="postgres://postgres@127.0.0.1:$pg_port/ferretdb"
  fi
  "$BIN" "${args[@]}" --handler=postgresql --postgresql-url="$url" "$@" &
  fd_pid=$!
  wait $fd_pid
}

# A free port in 20000-32767: below the ephemeral range.
pick_pg_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12768))
    if port_free "$p"; then echo "$p"; return; fi
  done
  die "no free port for PostgreSQL in 20000-32767"
}

case "${1:-}" in
  install) install ;;
  path) [ -x "$BIN" ] && echo "$BIN" || die "not built yet: run scripts/ferretdb.sh install" ;;
  start) shift; start "$@" ;;
  postgresql) shift; postgresql "$@" ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
