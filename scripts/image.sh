#!/usr/bin/env bash
# Builds wirelint's container image, and FerretDB's for tests and the
# deploy examples, with no pull: each is FROM scratch, its context made
# here from this machine's files (deploy/image/*Dockerfile say what goes
# in). Prints each image's tag on a line of its own.
#
#   scripts/image.sh                  both
#   scripts/image.sh wirelint         wirelint:VERSION (VERSION from Cargo.toml)
#   scripts/image.sh ferretdb         wirelint-ferretdb:1.24.2
#   scripts/image.sh wirelint --base gcr.io/distroless/cc-debian12:nonroot
#                                     on a base pulled from a registry instead
#
# wirelint's binary is target/release/wirelint (`cargo build --release
# --locked` when it is missing; WIRELINT_BINARY names another). FerretDB's
# is scripts/ferretdb.sh's build. An image whose inputs have not changed
# is not built again (the inputs' hash is its label dev.wirelint.inputs).
#
# Needs a Docker engine (`docker info` answers). Debian's:
#   apt-get install docker.io && dockerd --iptables=false --bridge=none &
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image.sh: $*" >&2; exit 1; }

which=all base=scratch
while [ $# -gt 0 ]; do
  case $1 in
    wirelint | ferretdb | all) which=$1 ;;
    --base) [ $# -ge 2 ] || die "--base needs an image"; base=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (wirelint, ferretdb, all, --base IMAGE)" ;;
  esac
  shift
done

command -v docker >/dev/null || die "no docker command: install Docker (Debian: apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers 'docker info': start one (Debian: dockerd --iptables=false --bridge=none &)"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || die "no version in Cargo.toml"

# The files a dynamically linked binary needs: itself and the libraries
# ldd lists (the loader included), each at its own path under ROOT.
copy_with_libraries() {
  local binary=$1 root=$2 at=$3 lib
  mkdir -p "$root$(dirname "$at")"
  cp "$binary" "$root$at"
  # Symbols are for debugging on the build machine: a fifth of the size.
  strip --strip-unneeded "$root$at" 2>/dev/null || true
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# The parts every image shares: /etc (a user of its own, host lookup
# through /etc/hosts and DNS), CA certificates, /tmp.
common_root() {
  local root=$1 user=$2
  mkdir -p "$root/etc/ssl/certs" "$root/tmp"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:65532:65532:%s:/var/lib/%s:/sbin/nologin\n' "$user" "$user" "$user" >"$root/etc/passwd"
  printf 'root:x:0:\n%s:x:65532:\n' "$user" >"$root/etc/group"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  else
    echo "image.sh: no /etc/ssl/certs/ca-certificates.crt here (apt-get install ca-certificates): the image will not verify TLS upstreams" >&2
  fi
}

# build TAG DOCKERFILE CONTEXT: unless an image TAG of the same inputs is
# there already.
build() {
  local tag=$1 dockerfile=$2 context=$3 inputs have
  cp "$dockerfile" "$context/Dockerfile"
  inputs=$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "base=$base") | sha256sum | cut -c1-16)
  have=$(docker image inspect "$tag" --format '{{index .Config.Labels "dev.wirelint.inputs"}}' 2>/dev/null || true)
  if [ "$have" = "$inputs" ]; then
    echo "image.sh: $tag is up to date" >&2
  else
    echo "image.sh: building $tag…" >&2
    local pull=()
    [ "$base" = scratch ] || pull=(--pull)
    DOCKER_BUILDKIT=0 docker build --quiet "${pull[@]}" --build-arg "BASE=$base" \
      --label "dev.wirelint.inputs=$inputs" --tag "$tag" "$context" >/dev/null 2>"$context.log" \
      || { cat "$context.log" >&2; die "docker build of $tag failed (output above)"; }
    # The image this one replaces, now untagged.
    docker image prune --force --filter "label=dev.wirelint.inputs" >/dev/null 2>&1 || true
    local size
    size=$(docker image inspect "$tag" --format '{{.Size}}')
    echo "image.sh: built $tag ($((size / 1024 / 1024)) MiB)" >&2
  fi
  echo "$tag"
}

work=target/image
mkdir -p "$work"
# One build at a time (test binaries running side by side may all ask).
exec 9>"$work/.lock"
flock 9

if [ "$which" != ferretdb ]; then
  binary=${WIRELINT_BINARY:-target/release/wirelint}
  if [ ! -x "$binary" ]; then
    [ -z "${WIRELINT_BINARY:-}" ] || die "WIRELINT_BINARY=$binary is not an executable"
    echo "image.sh: no $binary: cargo build --release --locked (several minutes)…" >&2
    cargo build --release --locked --quiet
  fi
  context=$work/wirelint
  rm -rf "$context"
  mkdir -p "$context/state"
  common_root "$context/rootfs" wirelint
  copy_with_libraries "$binary" "$context/rootfs" /usr/local/bin/wirelint
  build "wirelint:$version" deploy/image/Dockerfile "$context"
fi

if [ "$which" != wirelint ]; then
  ferretdb=$(scripts/ferretdb.sh install)
  context=$work/ferretdb
  rm -rf "$context"
  mkdir -p "$context/state/data" "$context/state/state"
  common_root "$context/rootfs" ferretdb
  copy_with_libraries "$ferretdb" "$context/rootfs" /usr/local/bin/ferretdb
  build "wirelint-ferretdb:1.24.2" deploy/image/ferretdb.Dockerfile "$context"
fi
