#!/usr/bin/env bash
# What the analysis costs in place: corpus applications (fixtures/realworld/,
# fixtures/requests/) run live through the release binary in front of
# FerretDB, each RUNS times; from each run's report, the analysis threads'
# share of wirelint's CPU and their µs per request
# (`counters.analysis_cpu`). Prints each application's median with the
# lowest and highest run, and the median over the applications.
#
#   scripts/inplace.sh [APP…]     default: every Python and Node application
#   RUNS=5 scripts/inplace.sh …   runs per application (default 3)
#   WIRELINT_BINARY=PATH …        another build (default target/release/wirelint)
#
# Needs what scripts/test.sh installs (FerretDB, pymongo and friends, the
# Node driver) and `cargo build --release` (target/release/wirelint).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
bin=${WIRELINT_BINARY:-target/release/wirelint}
[ -x "$bin" ] || { echo "inplace: build it first: cargo build --release" >&2; exit 2; }
work=$(mktemp -d /tmp/wirelint-inplace.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

fport=$(free_port)
scripts/ferretdb.sh start "$fport" "$work/ferretdb" >"$work/ferretdb.log" 2>&1 &
pids+=($!)
wait_port "$fport" || { echo "inplace: FerretDB did not start:" >&2; cat "$work/ferretdb.log" >&2; exit 1; }

apps=("$@")
if [ ${#apps[@]} -eq 0 ]; then
  for d in fixtures/realworld/*/ fixtures/requests/*/; do
    if [ -f "$d/app.py" ] || [ -f "$d/app.js" ]; then apps+=("$(basename "$d")"); fi
  done
fi

printf '%-44s %6s %24s %24s\n' application runs "share % [min-max]" "µs/request [min-max]"
: >"$work/all"
for app in "${apps[@]}"; do
  dir=
  for d in fixtures/realworld/"$app" fixtures/requests/"$app"; do [ -d "$d" ] && dir=$d; done
  [ -n "$dir" ] || { echo "inplace: no application $app" >&2; exit 2; }
  : >"$work/runs"
  for run in $(seq "$RUNS"); do
    port=$(free_port)
    config=()
    [ -f "$dir/wirelint.toml" ] && config=(--config "$dir/wirelint.toml")
    "$bin" proxy --listen "127.0.0.1:$port" --upstream "mongodb://127.0.0.1:$fport/" \
      "${config[@]}" --report "$work/report.json" >"$work/proxy.log" 2>&1 &
    proxy=$!
    wait_port "$port"
    uri="mongodb://127.0.0.1:$port/"
    if [ -f "$dir/app.py" ]; then
      python3 "$dir/app.py" "$uri" >"$work/app.log" 2>&1
    else
      NODE_PATH=tests/drivers/node/node_modules node "$dir/app.js" "$uri" >"$work/app.log" 2>&1
    fi || { echo "inplace: $app failed:" >&2; cat "$work/app.log" >&2; exit 1; }
    kill -TERM "$proxy"
    wait "$proxy" || true
    python3 - "$work/report.json" >>"$work/runs" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["counters"]["analysis_cpu"]
print(f"{100 * c['share']:.1f}\t{c['us_per_request']:.1f}")
PY
  done
  python3 - "$app" "$work/runs" "$work/all" <<'PY'
import statistics, sys
app, runs, all_ = sys.argv[1:]
rows = [tuple(map(float, l.split())) for l in open(runs)]
share, us = [r[0] for r in rows], [r[1] for r in rows]
m = (statistics.median(share), statistics.median(us))
print(f"{app:<44} {len(rows):>6} {m[0]:>10.1f} [{min(share):.1f}-{max(share):.1f}] {m[1]:>12.1f} [{min(us):.1f}-{max(us):.1f}]")
open(all_, "a").write(f"{m[0]}\t{m[1]}\n")
PY
done
python3 - "$work/all" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
share, us = [r[0] for r in rows], [r[1] for r in rows]
print(f"median over {len(rows)} applications: {statistics.median(share):.1f} % of wirelint's CPU "
      f"(from {min(share):.1f} to {max(share):.1f}), {statistics.median(us):.1f} µs/request "
      f"(from {min(us):.1f} to {max(us):.1f})")
PY
