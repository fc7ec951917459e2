#!/usr/bin/env bash
# Builds the example application's binary, app/bin/shop: a static Linux
# executable (CGO_ENABLED=0) that the FROM scratch image in app/Dockerfile
# holds. `docker-compose up --build` then makes the image from it.
# Needs Go 1.25 or newer; the driver comes from the Go module proxy (cached
# after the first build).
set -euo pipefail
cd "$(dirname "$0")"
command -v go >/dev/null || { echo "build.sh: Go is needed (apt-get install golang, or see https://go.dev/doc/install)" >&2; exit 1; }
mkdir -p bin
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags=-s -o bin/shop.tmp .
mv bin/shop.tmp bin/shop
echo "build.sh: built $(pwd)/bin/shop" >&2
