#!/usr/bin/env bash
# Runs wirelint's main job: the proxy in front of a MongoDB-compatible backend.
#
#   scripts/run.sh [wirelint proxy flags…]
#
# With no upstream given (no --upstream, WIRELINT_UPSTREAM or --config), it
# first starts a local FerretDB (SQLite handler, data under .wirelint/) on
# 127.0.0.1:27017 (or a free port), building FerretDB on first use, and stops
# it again when wirelint exits. wirelint listens on 127.0.0.1:27018 unless
# --listen says otherwise. Ctrl-C stops both. WIRELINT_BACKEND=postgresql
# puts that FerretDB on a PostgreSQL server of its own instead (Debian's
# postgresql package; data under .wirelint/ferretdb/postgresql).
set -euo pipefail
cd "$(dirname "$0")/.."

have_upstream=${WIRELINT_UPSTREAM:+yes}
[ -n "${WIRELINT_CONFIG:-}" ] && have_upstream=yes
listen=${WIRELINT_LISTEN:-127.0.0.1:27018}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --upstream|--upstream=*|--config|--config=*) have_upstream=yes ;;
    --listen) listen=${args[$((i + 1))]:-$listen} ;;
    --listen=*) listen=${args[$i]#--listen=} ;;
    -h|--help) have_upstream=help ;;
  esac
done

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

echo "run.sh: building wirelint (release)…" >&2
cargo build --release --quiet --bin wirelint
bin=target/release/wirelint

ferret_pid=
cleanup() { [ -n "$ferret_pid" ] && kill "$ferret_pid" 2>/dev/null && wait "$ferret_pid" 2>/dev/null; true; }
trap cleanup EXIT

if [ -z "$have_upstream" ]; then
  port=27017
  if ! port_free $port; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  fi
  scripts/ferretdb.sh install >/dev/null
  mkdir -p .wirelint
  storage=()
  case "${WIRELINT_BACKEND:-sqlite}" in
    sqlite) ;;
    postgresql) storage=(--postgresql) ;;
    *) echo "run.sh: WIRELINT_BACKEND=$WIRELINT_BACKEND: expected sqlite or postgresql" >&2; exit 2 ;;
  esac
  scripts/ferretdb.sh start "$port" "$PWD/.wirelint/ferretdb" "${storage[@]}" --log-level=warn >.wirelint/ferretdb.log 2>&1 &
  ferret_pid=$!
  for _ in $(seq 1 600); do
    port_free "$port" || break
    kill -0 "$ferret_pid" 2>/dev/null || { cat .wirelint/ferretdb.log >&2; echo "run.sh: FerretDB did not start (log above)" >&2; exit 1; }
    sleep 0.05
  done
  if [ ${#storage[@]} -gt 0 ]; then what="on PostgreSQL, its cluster"; else what="SQLite, data"; fi
  echo "run.sh: FerretDB v1.24.2 ($what in .wirelint/ferretdb) on 127.0.0.1:$port" >&2
  args+=(--upstream "mongodb://127.0.0.1:$port/")
fi

if [ "$have_upstream" != help ]; then
  echo
  echo "  Connect your application to:  mongodb://$listen/"
  echo "  (only the connection string changes; no directConnection needed)"
  echo
fi
"$bin" proxy --listen "$listen" "${args[@]}" &
wl_pid=$!
trap 'kill -TERM $wl_pid 2>/dev/null' INT TERM
status=0
wait "$wl_pid" || status=$?
# A signal interrupts the first wait; wait for wirelint's own shutdown.
if kill -0 "$wl_pid" 2>/dev/null; then wait "$wl_pid" || status=$?; fi
exit "$status"
