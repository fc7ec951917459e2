#!/usr/bin/env bash
# Runs every test. Installs what the tests need first (each step is skipped
# when already done): FerretDB v1.24.2 (scripts/ferretdb.sh), pymongo and
# MongoEngine (PyPI), the Node driver, Mongoose and mongosh (npm, into
# tests/drivers/node, with playwright-core), Chromium, HAProxy and socat
# (Debian, apt-get),
# maturin (PyPI: scripts/wheel.sh, which
# tests/python_plugin.rs runs, installs it; that test also installs pytest
# and pymongo from PyPI into a fresh virtual environment), cargo-deny
# (crates.io). The Go driver and Spring Data
# MongoDB applications of fixtures/realworld fetch their modules themselves
# on first run (`go run`: the Go module proxy, pinned by go.sum; `mvn`:
# Maven Central, pinned in each pom.xml).
#
#   scripts/test.sh [cargo test args…]
#
# testcontainers tests (real MongoDB in Docker) run only where `docker info`
# answers; elsewhere they stay "ignored" and this script says why.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "== $*" >&2; }

step "FerretDB"
scripts/ferretdb.sh install >/dev/null

step "pymongo and MongoEngine"
if ! python3 -c 'import pymongo, mongoengine' 2>/dev/null; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet -r tests/drivers/python/requirements.txt
fi

step "Node driver, Mongoose and mongosh"
if [ ! -x tests/drivers/node/node_modules/.bin/mongosh ] ||
   [ tests/drivers/node/package-lock.json -nt tests/drivers/node/node_modules/.package-lock.json ]; then
  (cd tests/drivers/node && npm ci --no-audit --no-fund --loglevel=error)
fi

step "Debian packages: Chromium (the dashboard's browser test, tests/dashboard.rs), HAProxy and socat (the relays of the benchmark smoke check)"
if ! command -v chromium >/dev/null 2>&1 || ! command -v haproxy >/dev/null 2>&1 || ! command -v socat >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium haproxy socat >/dev/null
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --locked --all-targets --quiet -- -D warnings

step "cargo build --release (tests/hostile_analysis.rs runs the release binary)"
cargo build --locked --release --quiet --bin wirelint

step "cargo test"
cargo test --locked "$@"

step "cargo deny (dependencies: licenses, bans, sources, advisories)"
if ! command -v cargo-deny >/dev/null 2>&1; then
  cargo install --locked --quiet cargo-deny --version "^0.20"
fi
cargo deny --log-level error check licenses bans sources
if ! cargo deny --log-level error check advisories 2>/tmp/wirelint-deny-advisories.log; then
  if grep -qiE "failed to fetch|unable to access|could not resolve|network|403|connect" /tmp/wirelint-deny-advisories.log; then
    echo "cargo deny advisories: NOT CHECKED, not passed: the RustSec advisory database (github.com) is unreachable from this machine." >&2
  else
    cat /tmp/wirelint-deny-advisories.log >&2
    exit 1
  fi
fi

step "benchmarks: a few seconds as a smoke check (figures printed, nothing asserted)"
cargo bench --locked --quiet --bench proxy -- --seconds 0.2 --rounds 1 --conns 1 --ferretdb-conns 1 --scale 100 | tail -4
cargo bench --locked --quiet --bench analysis -- --sample-count 3 >/dev/null

step "testcontainers"
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  cargo test --locked --test testcontainers -- --ignored
else
  echo "testcontainers: SKIPPED, not passed: no Docker engine answers 'docker info' on this machine." >&2
  echo "                (tests/testcontainers.rs stays 'ignored'; it runs where Docker is available)" >&2
fi
