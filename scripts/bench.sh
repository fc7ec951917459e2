#!/usr/bin/env bash
# The proxy benchmark: direct vs socat vs HAProxy (TCP mode) vs wirelint
# (analysis off and on) vs mongobetween, in one run, against an out-of-process
# memory-speed responder and FerretDB; then the same through the official Go
# driver (find, insert); then connections held at scale; then idle CPU with
# 100 pooled connections open; then the analysis micro-benchmarks.
#
#   scripts/bench.sh [--seconds 2] [--rounds 2] [--conns 1,16,64,256]
#                    [--ferretdb-conns 1,16,64] [--no-ferretdb] [--scale N]
#                    [--workloads ping,find,insert,cursor,read,mixed]
#                    [--no-go] [--no-idle] [--budgets 5,10,25 | --no-budgets]
#
# Prints tables; asserts nothing. See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# Peers, installed when possible; the table says which were not measured.
if ! command -v socat >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench.sh: installing socat (the plain TCP relay)" >&2
    (apt-get install -y -qq socat >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq socat; }) >/dev/null 2>&1 || true
  fi
  command -v socat >/dev/null || echo "bench.sh: socat unavailable; the tcp-relay row will be missing" >&2
fi
if ! command -v haproxy >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench.sh: installing haproxy (the relay to beat, in TCP mode)" >&2
    (apt-get install -y -qq haproxy >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq haproxy; }) >/dev/null 2>&1 || true
  fi
  command -v haproxy >/dev/null || echo "bench.sh: haproxy unavailable; its row will be missing and ratios are against socat" >&2
fi
if ! command -v mongobetween >/dev/null && [ ! -x "$HOME/go/bin/mongobetween" ]; then
  echo "bench.sh: trying go install github.com/coinbase/mongobetween@latest" >&2
  go install github.com/coinbase/mongobetween@latest >&2 || echo "bench.sh: mongobetween unavailable; its row will be missing" >&2
fi
scripts/ferretdb.sh install >/dev/null || echo "bench.sh: FerretDB unavailable; measuring the responder only" >&2

# Each connection through wirelint holds two descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
scale=$(( ($(ulimit -n) - 200) / 2 ))
[ "$scale" -gt 10000 ] && scale=10000

cargo build --release --quiet --bin wirelint
args=("$@")
[[ " $* " == *" --scale "* ]] || args+=(--scale "$scale")
# The Go driver generator (benches/go-load: the Go module proxy, pinned by
# go.sum) and the idle cost, unless told otherwise.
[[ " $* " == *" --no-go "* ]] || args+=(--go)
[[ " $* " == *" --no-idle "* ]] || args+=(--idle)
# The CPU budget's cells at 5, 10 and 25 %, unless told otherwise.
[[ " $* " == *" --no-budgets "* || " $* " == *" --budgets "* ]] || args+=(--budgets 5,10,25)
cargo bench --quiet --bench proxy -- "${args[@]}"
echo
cargo bench --quiet --bench analysis
