#!/usr/bin/env bash
# Builds the tier images iop/edge, iop/node, iop/cp (tag :dev), and iop/prometheus for the compose
# fleet, with NO network inside `docker build`: every dependency is resolved on the host first
# and copied in, which is also what an air-gapped GPU host needs.
#
# Usage: deploy/build_images.sh [--tag TAG] [--base IMAGE] [--skip-deps] [edge] [node] [cp]
#                               [prometheus]
#   --tag TAG      image tag (default dev)
#   --base IMAGE   Deno base image (default $DENO_IMAGE or iop/deno-base:2.9.6; the local
#                  iop/deno-base image is built by deploy/build_base_image.sh when missing)
#   --skip-deps    reuse node_modules and .deno_cache as they are (fully offline host)
#   images         which images to build (default: the three tiers and prometheus)
#
# Steps: 1) `deno install` fills node_modules from deno.json + deno.lock;
#        2) `DENO_DIR=.deno_cache deno cache services/<tier>/main.ts` proves every tier's import
#           graph resolves and caches any remote (https:) module into .deno_cache/remote;
#        3) `docker build --network none` per tier (context = repo root, see .dockerignore);
#        4) prometheus: `apt-get install --download-only` of Debian's `prometheus` package
#           against the base image's dpkg status (only what that image lacks), then
#           `docker build --network none -f deploy/prometheus/Dockerfile` on a temp context
#           holding those .deb files.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DENO_VERSION="${DENO_VERSION:-2.9.6}"
TAG="dev"
BASE="${DENO_IMAGE:-iop/deno-base:${DENO_VERSION}}"
SKIP_DEPS=0
TIERS=()
PROMETHEUS=0

while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG="${2:?--tag needs a value}"; shift ;;
    --base) BASE="${2:?--base needs a value}"; shift ;;
    --skip-deps) SKIP_DEPS=1 ;;
    edge | node | cp) TIERS+=("$1") ;;
    prometheus) PROMETHEUS=1 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "build_images: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
if [ ${#TIERS[@]} -eq 0 ] && [ "$PROMETHEUS" -eq 0 ]; then TIERS=(edge node cp); PROMETHEUS=1; fi

log() { echo "[build_images] $*"; }
t0=$(date +%s)
cd "$ROOT"

if ! docker info >/dev/null 2>&1; then
  echo "build_images: no Docker engine answers; run deploy/install_docker.sh first" >&2
  exit 1
fi
# Without the buildx plugin the CLI would fail under BuildKit; the classic builder needs none.
if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi

mains=()
for tier in "${TIERS[@]}"; do
  if [ ! -f "services/$tier/main.ts" ]; then
    echo "build_images: services/$tier/main.ts does not exist" >&2
    exit 1
  fi
  mains+=("services/$tier/main.ts")
done
# The cp image also carries the certificate tool.
mains+=("deploy/certs.ts")

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  case "$BASE" in
    iop/deno-base:*)
      log "base image $BASE missing: building it"
      "$ROOT/deploy/build_base_image.sh" --tag "$BASE"
      ;;
    *)
      echo "build_images: base image $BASE is not present locally (nothing can be pulled)" >&2
      exit 1
      ;;
  esac
fi

if [ "$SKIP_DEPS" -eq 0 ]; then
  if ! deno --version 2>/dev/null | head -n 1 | grep -q "^deno ${DENO_VERSION} "; then
    echo "build_images: warning: host deno is not ${DENO_VERSION}; the lockfile may change" >&2
  fi
  t=$(date +%s)
  log "deno install (node_modules from deno.json + deno.lock)"
  deno install --quiet
  # A separate DENO_DIR inside the context: only its remote/ part goes into the images, and
  # --cached-only at run time then finds every module without a network.
  log "DENO_DIR=.deno_cache deno cache ${mains[*]}"
  mkdir -p .deno_cache/remote
  DENO_DIR="$ROOT/.deno_cache" deno cache --quiet "${mains[@]}"
  # Only remote/ is portable (the emit and analysis caches are keyed by host paths, the npm cache
  # duplicates node_modules); dropping the rest also keeps emitted .js out of `deno fmt`/`lint`.
  find .deno_cache -mindepth 1 -maxdepth 1 ! -name remote -exec rm -rf {} +
  log "dependencies resolved in $(($(date +%s) - t)) s"
else
  log "--skip-deps: using node_modules and .deno_cache as they are"
  mkdir -p .deno_cache/remote
fi
if [ ! -f node_modules/.deno/.setup-cache.bin ]; then
  echo "build_images: node_modules is not a Deno-installed tree; run without --skip-deps" >&2
  exit 1
fi

for tier in "${TIERS[@]}"; do
  t=$(date +%s)
  image="iop/${tier}:${TAG}"
  log "docker build --network none -f Dockerfile.${tier} -t ${image} (base ${BASE})"
  build_log=$(mktemp)
  if ! docker build --network none --build-arg "DENO_IMAGE=${BASE}" \
    -f "Dockerfile.${tier}" -t "$image" . >"$build_log" 2>&1; then
    tail -n 40 "$build_log" >&2
    rm -f "$build_log"
    echo "build_images: docker build of ${image} failed" >&2
    exit 1
  fi
  rm -f "$build_log"
  size=$(docker image inspect --format '{{.Size}}' "$image")
  log "built ${image} ($((size / 1024 / 1024)) MB) in $(($(date +%s) - t)) s"
done
# build_prometheus: iop/prometheus:TAG from Debian's package, installed offline on the base image.
build_prometheus() {
  local t image ctx build_log size
  t=$(date +%s)
  image="iop/prometheus:${TAG}"
  ctx=$(mktemp -d /tmp/iop-prometheus.XXXXXX)
  mkdir -p "$ctx/debs/partial"
  # apt resolves against the base image's installed packages, so only what it lacks is fetched.
  docker run --rm --network none --entrypoint cat "$BASE" /var/lib/dpkg/status >"$ctx/status"
  apt_fetch() {
    apt-get -qq -o Dir::State::status="$ctx/status" -o Dir::Cache::archives="$ctx/debs" \
      -o Debug::NoLocking=1 install --download-only --no-install-recommends -y prometheus
  }
  log "apt-get install --download-only prometheus (what ${BASE} lacks)"
  if ! apt_fetch >"$ctx/apt.log" 2>&1; then
    log "apt lists look stale: apt-get update, then again"
    apt-get update -qq >/dev/null
    apt_fetch >"$ctx/apt.log" 2>&1 || { tail -n 20 "$ctx/apt.log" >&2; rm -rf "$ctx"; exit 1; }
  fi
  rm -rf "$ctx/debs/partial" "$ctx/debs/lock" "$ctx/status" "$ctx/apt.log"
  if ! ls "$ctx"/debs/prometheus_*.deb >/dev/null 2>&1; then
    echo "build_images: apt fetched no prometheus package" >&2
    rm -rf "$ctx"
    exit 1
  fi
  log "docker build --network none -f deploy/prometheus/Dockerfile -t ${image} ($(find "$ctx/debs" -name '*.deb' | wc -l) .deb files)"
  build_log=$(mktemp)
  if ! docker build --network none --build-arg "DENO_IMAGE=${BASE}" \
    -f "$ROOT/deploy/prometheus/Dockerfile" -t "$image" "$ctx" >"$build_log" 2>&1; then
    tail -n 40 "$build_log" >&2
    rm -rf "$build_log" "$ctx"
    echo "build_images: docker build of ${image} failed" >&2
    exit 1
  fi
  rm -rf "$build_log" "$ctx"
  size=$(docker image inspect --format '{{.Size}}' "$image")
  log "built ${image} ($((size / 1024 / 1024)) MB) in $(($(date +%s) - t)) s"
}
if [ "$PROMETHEUS" -eq 1 ]; then build_prometheus; fi
log "done in $(($(date +%s) - t0)) s"
