#!/usr/bin/env bash
# Packs the `wirelint` npm package (the binary plus the Jest and Vitest
# global setups, node/) into target/npm/, building the release binary
# first only when target/release/wirelint is missing. Prints the tarball's
# path.
#
#   scripts/npm-pack.sh && npm install --save-dev target/npm/wirelint-*.tgz
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x target/release/wirelint ]; then
  cargo build --release --locked >&2
fi
stage=target/npm/stage
rm -rf target/npm
mkdir -p "$stage/native"
cp -R node/. "$stage/"
rm -rf "$stage/node_modules"
cp target/release/wirelint "$stage/native/wirelint"
chmod 755 "$stage/native/wirelint" "$stage/bin/wirelint.js"
name=$(cd "$stage" && npm pack --silent --pack-destination .. | tail -n 1)
echo "$PWD/target/npm/$name"
