#!/usr/bin/env bash
# Runs every test: the unit and in-process tests (what `cargo test` alone
# runs) and the end-to-end suites (`--features e2e`); the real-driver,
# scenario, real-world and failover suites twice, with FerretDB on SQLite
# and on PostgreSQL (WIRELINT_BACKEND=postgresql). Installs what the
# end-to-end suites need first, each install skipped when already done:
# FerretDB v1.24.2 (scripts/ferretdb.sh), an OpenTelemetry Collector
# (scripts/otelcol.sh: OTLP receiver and file exporter, built from the Go
# module proxy, pinned by tests/otelcol/go.sum), pymongo and MongoEngine (PyPI),
# the Node driver, Mongoose, mongosh and playwright-core (npm), Chromium,
# HAProxy, socat, Prometheus, valgrind, PostgreSQL and tcpdump (Debian, apt-get),
# maturin (PyPI; tests/python_plugin.rs also installs pytest and pymongo from
# PyPI into a fresh virtual environment; tests/node_runners.rs installs the
# Jest and Vitest examples' dependencies from npm with `npm ci`;
# tests/junit.rs installs java/ into ~/.m2 and fetches Spring Boot from
# Maven Central on first use), cargo-deny (crates.io). The Go driver and Spring Data
# MongoDB applications of fixtures/realworld fetch their modules themselves
# on first run (`go run`: the Go module proxy, pinned by go.sum; `mvn`:
# Maven Central, pinned in each pom.xml).
#
# What is installed outside the clone stays for the next run on the same
# machine: FerretDB, the collector and the npm packages under ~/.cache/wirelint
# ($WIRELINT_CACHE), cargo-deny in ~/.cargo/bin, the PyPI and Debian
# packages, the Go and Maven module caches.
#
#   scripts/test.sh                     everything
#   scripts/test.sh [cargo test args…]  the same, but the tests as one
#                                       `cargo test --features e2e[,containers] ARGS…`
#
# With no arguments the test binaries run two at a time
# ($WIRELINT_TEST_LANES), each one's output in target/test-logs/ (printed
# when it fails); a job still running after $WIRELINT_JOB_TIMEOUT seconds
# (2400) fails, its processes listed in its log. The release binary is
# built once, by the wheel (scripts/wheel.sh), beside clippy and the test
# build; the hostile-analysis suite, the wheel's test and the benchmark
# smoke check all use it.
#
# Each step prints its seconds when it ends, and all of them at the end.
#
# The container suites (wirelint's image and the FerretDB image built by
# scripts/image.sh, the deploy examples, each runner's Testcontainers
# helper) need a Docker engine. When none answers `docker info`, this
# script installs Debian's docker.io (and docker-compose) if missing and
# starts `dockerd --iptables=false --bridge=none` for the run, stopping it
# at the end; with an engine it runs the tests with `--features
# e2e,containers`. Where no engine can start it says why, and the
# container tests stay "ignored", never counted as passed.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${WIRELINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wirelint}
export WIRELINT_CACHE=$CACHE

steps=()
step_name=
step_began=0
end_step() {
  [ -n "$step_name" ] || return 0
  local took=$((SECONDS - step_began))
  echo "-- ${took} s: $step_name${1:-}" >&2
  steps+=("$(printf '%6d s  %s%s' "$took" "$step_name" "${1:-}")")
  step_name=
}
# step NAME [WHAT IT IS FOR…]: ends the step before, starts this one.
step() {
  end_step
  step_name=$1
  step_began=$SECONDS
  echo "== $1${2:+: ${*:2}}" >&2
}
release_pid=0
dockerd_pid=0
summary() {
  local status=$1
  # The Docker engine this run started, with what still runs in it.
  if [ "$dockerd_pid" -gt 0 ]; then
    docker ps -q 2>/dev/null | xargs -r docker rm -f >/dev/null 2>&1 || true
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  # A release build still running in the background (a step failed).
  if [ "$release_pid" -gt 0 ]; then kill -- -"$release_pid" 2>/dev/null || true; fi
  if [ "$status" -ne 0 ]; then end_step " (FAILED)"; else end_step; fi
  echo "== steps, in seconds:" >&2
  printf '%s\n' "${steps[@]}" >&2
  printf '%6d s  in all%s\n' "$SECONDS" "$([ "$status" -eq 0 ] || echo ", FAILED")" >&2
}
trap 'summary $?' EXIT

# Disk: the run needs about 6 GB in target/ (the test build, the release
# build, the images), more if Docker has to be installed. Say what there
# is, so that a build that fails for space says why at its start too.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
echo "disk: $((free_kb / 1024 / 1024)) GB free where target/ is ($(df -P . | awk 'NR == 2 { print $6 }'))" >&2
if [ "$free_kb" -lt $((6 * 1024 * 1024)) ]; then
  echo "disk: WARNING: under 6 GB free; the build may fail with 'No space left on device'." >&2
fi
# A CI run builds once: incremental state would only take space (2.5 GB).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

step "FerretDB" "(built once, kept in $CACHE)"
scripts/ferretdb.sh install >/dev/null

step "OpenTelemetry Collector" "(tests/otlp.rs; built once from tests/otelcol, kept in $CACHE)"
scripts/otelcol.sh install

step "pymongo, MongoEngine, Beanie and pytest"
if ! python3 -c 'import pymongo, mongoengine, beanie, pytest' 2>/dev/null; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet -r tests/drivers/python/requirements.txt \
    -r fixtures/requests/requirements.txt
fi

step "Node driver, Mongoose, mongosh and playwright-core" "(npm; kept in $CACHE by the lock file's hash)"
node=tests/drivers/node
lock=$(sha256sum "$node/package-lock.json" | cut -c1-16)
kept=$CACHE/node-$lock
if [ ! -x "$kept/node_modules/.bin/mongosh" ]; then
  mkdir -p "$CACHE"
  fresh=$(mktemp -d "$CACHE/node-new.XXXXXX")
  cp "$node/package.json" "$node/package-lock.json" "$fresh/"
  (cd "$fresh" && npm ci --no-audit --no-fund --loglevel=error)
  rm -rf "$kept"
  mv "$fresh" "$kept"
fi
if [ "$(cat "$node/node_modules/.wirelint-lock" 2>/dev/null)" != "$lock" ]; then
  rm -rf "$node/node_modules"
  # Hard links: a copy of the tree that costs no space and a second or two.
  cp -al "$kept/node_modules" "$node/node_modules" 2>/dev/null || cp -a "$kept/node_modules" "$node/node_modules"
  echo "$lock" >"$node/node_modules/.wirelint-lock"
fi

step "Debian packages" "Chromium (the dashboard's browser test, tests/dashboard.rs), HAProxy and socat (the relays of the benchmark smoke check), Prometheus and promtool (deploy/prometheus/, tests/fleet.rs), valgrind (scripts/icount.sh), PostgreSQL (FerretDB's second storage), tcpdump (tests/realworld.rs captures each application on loopback for wirelint analyse)"
if ! command -v tcpdump >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 || ! command -v haproxy >/dev/null 2>&1 || ! command -v socat >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1 || ! [ -x "$(pg_config --bindir 2>/dev/null)/initdb" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium haproxy socat prometheus valgrind postgresql tcpdump >/dev/null
fi
# Debian starts a cluster of its own on 5432 on installation: the tests
# start their own servers (scripts/ferretdb.sh postgresql) and need none.

step "Docker engine" "(the container suites: Debian's docker.io and docker-compose; started for this run when none answers)"
features=e2e
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq docker.io docker-compose >/dev/null || true
  fi
  if command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    mkdir -p target
    # No bridge and no iptables: containers share the host's network,
    # which is all these machines allow (and what the tests use).
    setsid dockerd --iptables=false --bridge=none >target/dockerd.log 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 60); do
      docker info >/dev/null 2>&1 && break
      sleep 0.5
    done
  fi
fi
if docker info >/dev/null 2>&1; then
  features=e2e,containers
  echo "Docker engine: $(docker version --format '{{.Server.Version}}')$([ "$dockerd_pid" -eq 0 ] || echo ", started for this run (its log: target/dockerd.log)")" >&2
else
  why="no Docker engine answers 'docker info'"
  if [ "$(id -u)" -ne 0 ]; then why="$why, and only root starts one here"; fi
  if [ -s target/dockerd.log ]; then why="$why; dockerd said: $(tail -n 3 target/dockerd.log | tr '\n' ' ')"; fi
  echo "containers: SKIPPED, not passed: $why. The container tests (tests/testcontainers.rs, tests/deploy.rs, and those of junit, node_runners and python_plugin) stay 'ignored'." >&2
fi
export WIRELINT_TEST_FEATURES=$features

step "maturin" "(PyPI: scripts/wheel.sh builds the wheel and the release binary with it)"
if ! python3 -m maturin --version >/dev/null 2>&1; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet "maturin>=1.7,<2"
fi

step "cargo-deny" "(crates.io, built once into ~/.cargo/bin)"
if ! command -v cargo-deny >/dev/null 2>&1; then
  cargo install --locked --quiet cargo-deny --version "^0.20"
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "Prometheus rules" "(deploy/prometheus: promtool check and unit tests)"
promtool check rules deploy/prometheus/rules.yml
promtool test rules deploy/prometheus/rules_test.yml

# The release binary, through the wheel: maturin's build of it differs from
# `cargo build --release` only in stripping symbols, which would make cargo
# build the whole-program-optimised binary a second time. The wheel's test
# then finds it built, and everything else runs target/release/wirelint.
# Its last stage (LTO, one code-generation unit) keeps one core busy: clippy
# and the test build run beside it.
mkdir -p target
release_log=target/release-build.log
release_began=$SECONDS
# (A session of its own, so that a failure before it ends can stop it.)
setsid scripts/wheel.sh >/dev/null 2>"$release_log" &
release_pid=$!
echo "== release build started in the background (scripts/wheel.sh; its log: $release_log)" >&2

step "cargo clippy"
cargo clippy --locked --all-targets --features "$features" --quiet -- -D warnings

step "cargo test --no-run" "(the test build)"
cargo test --locked --features "$features" --no-run --quiet

step "release build" "(time spent waiting for it here)"
built=0
wait "$release_pid" || built=$?
release_pid=0
if [ "$built" -ne 0 ]; then
  cat "$release_log" >&2
  echo "the release build (scripts/wheel.sh) failed" >&2
  exit 1
fi
echo "release build: $((SECONDS - release_began)) s from its start; target/release/wirelint $(du -h target/release/wirelint | cut -f1)" >&2
steps+=("$(printf '%6d s  %s' "$((SECONDS - release_began))" "(release build, from its start in the background)")")

if [ "$features" = e2e,containers ]; then
  step "images" "(scripts/image.sh: wirelint's and FerretDB's, for the container suites)"
  scripts/image.sh >/dev/null
fi

step "cargo test"
if [ $# -gt 0 ]; then
  cargo test --locked --features "$features" "$@"
else
  logs=target/test-logs
  rm -rf "$logs"
  mkdir -p "$logs"
  # One test binary, its output to its log; a line when it ends.
  # A job is a test binary, or TEST@postgresql: that binary again with
  # every FerretDB on PostgreSQL instead of SQLite (WIRELINT_BACKEND).
  run_one() {
    local job=$1 name args began=$SECONDS status=0 storage=sqlite
    case $job in
      *@postgresql) storage=postgresql ;;
    esac
    case ${job%@*} in
      unit) name=unit args=(--lib --bins) ;;
      doc) name=doc args=(--doc) ;;
      *) name=$job args=(--test "${job%@*}") ;;
    esac
    local log=$TEST_LOGS/$name.log limit=${WIRELINT_JOB_TIMEOUT:-2400}
    # No job may hold the run: past its limit, what is still running is
    # listed in its log, and timeout(1) kills its process group (the test
    # binary and whatever it started).
    : >"$log"
    ( sleep "$limit" && echo "==== $name: still running after $limit s; the processes then:" &&
      ps -eo pid,ppid,pgid,etimes,args --forest ) >>"$log" 2>&1 &
    local watchdog=$!
    WIRELINT_BACKEND=$storage timeout --kill-after=30 "$((limit + 5))" \
      cargo test --locked --features "$WIRELINT_TEST_FEATURES" "${args[@]}" >>"$log" 2>&1 || status=$?
    pkill -P "$watchdog" sleep 2>/dev/null || true
    kill "$watchdog" 2>/dev/null || true
    local took=$((SECONDS - began))
    local result
    # The sum over the job's binaries (--lib --bins is two).
    result=$(awk '/^test result:/ {r = r == "" || $3 == "ok." && r == "ok." ? $3 : "FAILED."; p += $4; f += $6; i += $8}
                  END {if (r != "") printf "%s %d passed; %d failed; %d ignored", r, p, f, i}' "$TEST_LOGS/$name.log")
    echo "$name $status $took" >>"$TEST_LOGS/results"
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
      result="FAILED: killed after $limit s (WIRELINT_JOB_TIMEOUT)"
    fi
    printf '   %-20s %4d s  %s\n' "$name" "$took" "${result:-FAILED to run (status $status)}" >&2
  }
  export -f run_one
  export TEST_LOGS=$logs
  # The slowest first, so that the lanes end together.
  # The real-driver, scenario, real-world and failover suites run on both
  # of FerretDB's storages. The two real-world runs are apart: on a fresh
  # machine the first fetches the Maven and Go modules, and Maven 3.8 does
  # not lock its local repository against a second build at once.
  first=(realworld hostile_analysis realworld@postgresql scenarios scenarios@postgresql soak junit node_runners python_plugin drivers drivers@postgresql failover failover@postgresql analysis_e2e faults proxy_e2e dashboard bad_input)
  jobs=("${first[@]}")
  for f in tests/*.rs; do
    t=$(basename "$f" .rs)
    [[ " ${first[*]} " == *" $t "* ]] || jobs+=("$t")
  done
  jobs+=(unit doc)
  printf '%s\n' "${jobs[@]}" | xargs -P "${WIRELINT_TEST_LANES:-2}" -I{} bash -c 'run_one "$1"' _ {} || true
  failed=$(awk '$2 != 0 {print $1}' "$logs/results")
  ran=$(wc -l <"$logs/results")
  [ "$ran" -eq "${#jobs[@]}" ] || { echo "only $ran of ${#jobs[@]} test binaries reported" >&2; exit 1; }
  awk '/^test result:/ {for (i = 1; i <= NF; i++) if ($i ~ /^(passed|failed|ignored);?$/) n[$i] += $(i - 1)}
       END {printf "   all: %d passed, %d failed, %d ignored\n", n["passed;"], n["failed;"], n["ignored;"]}' "$logs"/*.log >&2
  if [ -n "$failed" ]; then
    for name in $failed; do
      echo "==== $name: its output ($logs/$name.log)" >&2
      cat "$logs/$name.log" >&2
    done
    # Each panic's message once more, last: where a long log is cut in the
    # middle, the reason still shows.
    for name in $failed; do
      echo "==== $name: its panics" >&2
      awk '/panicked at/ {p = 1} /^stack backtrace:|^note: run with/ {p = 0} p' "$logs/$name.log" | head -c 20000 >&2
    done
    echo "failed: $(echo $failed)" >&2
    exit 1
  fi
fi

step "cargo deny" "(dependencies: licenses, bans, sources, advisories)"
cargo deny --log-level error check licenses bans sources
if ! cargo deny --log-level error check advisories 2>/tmp/wirelint-deny-advisories.log; then
  if grep -qiE "failed to fetch|unable to access|could not resolve|network|403|connect" /tmp/wirelint-deny-advisories.log; then
    echo "cargo deny advisories: NOT CHECKED, not passed: the RustSec advisory database (github.com) is unreachable from this machine." >&2
  else
    cat /tmp/wirelint-deny-advisories.log >&2
    exit 1
  fi
fi

# The harness built as the tests were (no optimised build of its own), in
# front of the release binary: it shows the benchmarks run, its figures
# are not measurements (scripts/bench.sh measures).
step "benchmarks" "a few seconds as a smoke check (figures printed, nothing asserted)"
cargo bench --locked --quiet --profile dev --features "$features" --bench proxy -- --seconds 0.2 --rounds 1 --conns 1 --ferretdb-conns 1 --scale 100 | tail -4
cargo bench --locked --quiet --profile dev --features "$features" --bench analysis -- --sample-count 3 >/dev/null

# Instructions per request/reply pair (callgrind) against
# benches/icount-baseline.tsv: fails on a rise of more than 3 %.
step "instruction counts" "the analysis per message under callgrind, against its baseline (scripts/icount.sh)"
scripts/icount.sh

