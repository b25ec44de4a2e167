#!/usr/bin/env bash
# Installs (idempotently) what the image build and the container suites need on Debian 12:
# Docker engine (docker.io), compose v2 (Debian trixie's docker-compose package: bookworm only
# has compose v1, testcontainers needs v2; it is a static binary needing only libc) and
# debootstrap; then starts dockerd when no engine answers and waits up to 60 s for it.
# Runs as root, non-interactively (CI's .ci/run uses it too). Each step is skipped when done.
set -euo pipefail

log() { echo "[install_docker] $*"; }
start=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
  echo "install_docker: must run as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then apt-get update -qq; apt_updated=1; fi
  apt-get install -y -qq "$@" >/dev/null
}

if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
  log "docker engine already installed ($(docker --version))"
else
  log "installing docker.io from apt"
  apt_install docker.io
fi

if command -v debootstrap >/dev/null 2>&1; then
  log "debootstrap already installed"
else
  log "installing debootstrap from apt"
  apt_install debootstrap
fi

if docker compose version >/dev/null 2>&1; then
  log "compose v2 already installed ($(docker compose version --short 2>/dev/null || true))"
else
  # Only this one package is taken from trixie, through a private apt state directory, so the
  # host's sources and package lists stay pure bookworm.
  log "installing compose v2 (docker-compose from Debian trixie)"
  d=$(mktemp -d /tmp/iop-compose.XXXXXX)
  mkdir -p "$d/parts" "$d/lists/partial"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    awk 'BEGIN{RS="";ORS="\n\n"} NR==1' /etc/apt/sources.list.d/debian.sources |
      sed 's/^Suites:.*/Suites: trixie/' >"$d/parts/trixie.sources"
  else
    # One-line sources.list style: reuse the first Debian mirror with the trixie suite.
    mirror=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
      "${mirror:-http://deb.debian.org/debian}" /usr/share/keyrings/debian-archive-keyring.gpg \
      >"$d/parts/trixie.sources"
  fi
  o=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$d/parts"
    -o "Dir::State::Lists=$d/lists")
  apt-get "${o[@]}" update -qq
  (cd "$d" && apt-get "${o[@]}" download docker-compose >/dev/null)
  dpkg -i "$d"/docker-compose_*.deb >/dev/null
  rm -rf "$d"
fi

if docker info >/dev/null 2>&1; then
  log "docker engine answers"
else
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    log "starting docker via systemd"
    systemctl start docker || true
  fi
  pid=""
  if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/dockerd.log)"
    # setsid detaches dockerd from this script's session so it outlives the caller.
    setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
    pid=$!
  fi
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    # Stop waiting as soon as a dockerd we started has died.
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    tail -n 20 /var/log/dockerd.log >&2 || true
    echo "install_docker: dockerd did not answer (waited up to 60 s; see /var/log/dockerd.log)" >&2
    exit 1
  fi
  log "docker engine started"
fi

log "$(docker compose version) ready in $(($(date +%s) - start)) s"
