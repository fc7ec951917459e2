#!/usr/bin/env bash
# Builds the `wirelint` Python wheel (the binary plus the pytest plugin,
# python/) into target/wheels/, installing maturin from PyPI first if it is
# missing. Prints the wheel's path.
#
#   scripts/wheel.sh && pip install target/wheels/wirelint-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -m maturin --version >/dev/null 2>&1; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet "maturin>=1.7,<2" >&2
fi
rm -rf target/wheels
(cd python && python3 -m maturin build --release --locked --quiet --out ../target/wheels >&2)
ls target/wheels/wirelint-*.whl
