#!/usr/bin/env bash
# Builds the Deno base image (default iop/deno-base:2.9.6) without pulling from any registry:
# debootstrap a minimal Debian bookworm rootfs, copy in the pinned Deno binary, `docker import`.
# The tier Dockerfiles take it via `--build-arg DENO_IMAGE=iop/deno-base:2.9.6`.
#
# Usage: deploy/build_base_image.sh [--force] [--tag NAME:TAG]
#   --force   rebuild even when the image already exists (default: skip if present)
#   --tag     image name (default iop/deno-base:$DENO_VERSION)
# Env: DENO_VERSION (default 2.9.6), DEBIAN_SUITE (default bookworm),
#      DEBIAN_MIRROR (optional; debootstrap's default mirror otherwise).
# Needs root (debootstrap) and a running Docker engine; network only to apt and npm mirrors.
set -euo pipefail

DENO_VERSION="${DENO_VERSION:-2.9.6}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
TAG="iop/deno-base:${DENO_VERSION}"
FORCE=0

while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    --tag) TAG="${2:?--tag needs a value}"; shift ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build_base_image: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[build_base_image] $*"; }
start=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
  echo "build_base_image: must run as root (debootstrap needs it)" >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "build_base_image: no Docker engine answers; run deploy/install_docker.sh first" >&2
  exit 1
fi

if [ "$FORCE" -eq 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "image $TAG already exists; skipping (use --force to rebuild)"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  log "installing debootstrap via apt"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

work=$(mktemp -d /tmp/iop-deno-base.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
rootfs="$work/rootfs"

# is_deno_binary PATH: true when PATH is an ELF executable reporting the pinned version.
is_deno_binary() {
  [ -f "$1" ] && [ -x "$1" ] && [ "$(head -c 4 "$1" | tr -d '\0')" = $'\x7fELF' ] &&
    "$1" --version 2>/dev/null | head -n 1 | grep -q "^deno ${DENO_VERSION} "
}

# The binary on PATH is reused when it is the pinned version; otherwise the npm package
# (which ships the binary itself) is installed into a temp prefix.
deno_bin=""
if command -v deno >/dev/null 2>&1; then
  candidate=$(readlink -f "$(command -v deno)")
  if is_deno_binary "$candidate"; then
    deno_bin="$candidate"
    log "using Deno ${DENO_VERSION} from PATH: $deno_bin"
  fi
fi
if [ -z "$deno_bin" ]; then
  log "fetching Deno ${DENO_VERSION} from npm (deno@${DENO_VERSION})"
  npm install --silent --no-audit --no-fund --prefix "$work/npm" "deno@${DENO_VERSION}" >/dev/null
  while IFS= read -r f; do
    if is_deno_binary "$f"; then deno_bin="$f"; break; fi
  done < <(find "$work/npm/node_modules" -type f -name deno)
  if [ -z "$deno_bin" ]; then
    echo "build_base_image: no Deno ${DENO_VERSION} binary found in the npm package" >&2
    exit 1
  fi
  log "using Deno binary $deno_bin"
fi

# tini is PID 1 so SIGTERM reaches deno and zombies are reaped (the official image does the same).
log "debootstrap --variant=minbase ${DEBIAN_SUITE} (about 45 s)"
mirror_args=()
if [ -n "${DEBIAN_MIRROR:-}" ]; then mirror_args=("$DEBIAN_MIRROR"); fi
debootstrap --variant=minbase --include=tini "$DEBIAN_SUITE" "$rootfs" "${mirror_args[@]}" \
  >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "build_base_image: debootstrap failed" >&2
  exit 1
}

log "trimming rootfs (apt lists/caches, docs, man pages, locales)"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/usr/share/locale/* "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
mkdir -p "$rootfs"/tmp && chmod 1777 "$rootfs"/tmp

log "installing deno into /usr/local/bin"
install -m 0755 "$deno_bin" "$rootfs/usr/local/bin/deno"
log "chroot check: $(chroot "$rootfs" /usr/local/bin/deno --version | head -n 1)"

log "importing rootfs as $TAG"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV DENO_VERSION=${DENO_VERSION}" \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV DENO_NO_UPDATE_CHECK=1' \
  --change 'ENV DENO_NO_PROMPT=1' \
  --change "LABEL org.opencontainers.image.title=iop-deno-base" \
  --change "LABEL org.opencontainers.image.version=${DENO_VERSION}" \
  --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' \
  --change 'CMD ["deno", "--version"]' \
  - "$TAG" >/dev/null

size=$(docker image inspect --format '{{.Size}}' "$TAG")
log "built $TAG ($((size / 1024 / 1024)) MB) in $(($(date +%s) - start)) s"
