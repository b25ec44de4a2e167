#!/usr/bin/env bash
# Creates the Swarm secrets compose/stack.yaml needs, on a swarm manager:
#   certificates  the fleet CA (iop-ca.pem), cp, edge-a, edge-b, and the enrollment
#                 certificates of the rules gpu and cli (deploy/certs.ts)
#   tokens        iop-gpu-token, iop-cli-token (enrollment secrets), iop-edge-a-cp-credential,
#                 iop-edge-b-cp-credential, iop-cp-read-token, iop-cp-operate-token (random)
#
# Usage: deploy/swarm_secrets.sh [--dir DIR] [--edge-a-hosts H,H] [--edge-b-hosts H,H]
#   --dir DIR          keep the CA, certificates and tokens in DIR (created if missing, owner
#                      only) to issue more certificates later, rotate the CA, or read a token
#                      (DIR/tokens/iop-cp-read-token); certificates already there are kept.
#                      Without it they are made in a temporary directory that is removed,
#                      CA key included.
#   --edge-a-hosts     extra names edge-a's certificate covers (nodes dial it as `edge-a`)
#   --edge-b-hosts     the same for edge-b
# A secret that exists already is kept (Swarm secrets cannot change while in use): remove the
# stack and `docker secret rm` it first to replace it. Needs deno on PATH, or the image
# ${IOP_IMAGE_REPO:-iop}/cp:${IOP_IMAGE_TAG:-dev} (which carries deploy/certs.ts).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=""
EDGE_A="edge-a"
EDGE_B="edge-b"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a value}"; shift ;;
    --edge-a-hosts) EDGE_A="edge-a=edge-a,${2:?--edge-a-hosts needs a value}"; shift ;;
    --edge-b-hosts) EDGE_B="edge-b=edge-b,${2:?--edge-b-hosts needs a value}"; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "swarm_secrets: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$(docker info --format '{{.Swarm.ControlAvailable}}' 2>/dev/null)" != "true" ]; then
  echo "swarm_secrets: this Docker engine is not a swarm manager (docker swarm init, or run it on a manager)" >&2
  exit 1
fi

keep=1
if [ -z "$DIR" ]; then
  DIR=$(mktemp -d /tmp/iop-swarm-secrets.XXXXXX)
  keep=0
  trap 'rm -rf "$DIR"' EXIT
fi
mkdir -p "$DIR/tokens"
chmod 700 "$DIR" "$DIR/tokens"

certs_args=(--dir "$DIR" --cp cp --edge "$EDGE_A" --edge "$EDGE_B" --enroll gpu --enroll cli)
if command -v deno >/dev/null 2>&1; then
  (cd "$ROOT" && deno run -A deploy/certs.ts "${certs_args[@]}")
else
  image="${IOP_IMAGE_REPO:-iop}/cp:${IOP_IMAGE_TAG:-dev}"
  docker run --rm --network none --user "$(id -u):$(id -g)" -v "$DIR:$DIR" "$image" \
    deno run --cached-only -A deploy/certs.ts "${certs_args[@]}"
fi

for name in iop-gpu-token iop-cli-token iop-edge-a-cp-credential iop-edge-b-cp-credential \
  iop-cp-read-token iop-cp-operate-token; do
  if [ ! -s "$DIR/tokens/$name" ]; then
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/tokens/$name")
  fi
done

# secret NAME FILE: creates the Swarm secret NAME from FILE unless it exists.
created=0
secret() {
  if docker secret inspect "$1" >/dev/null 2>&1; then
    echo "swarm_secrets: kept $1 (exists)"
  else
    docker secret create --label iop=fleet "$1" "$2" >/dev/null
    echo "swarm_secrets: created $1"
    created=$((created + 1))
  fi
}
secret iop-ca.pem "$DIR/ca.pem"
secret iop-cp.pem "$DIR/cp-cp.pem"
secret iop-cp-key.pem "$DIR/cp-cp-key.pem"
secret iop-edge-a.pem "$DIR/edge-edge-a.pem"
secret iop-edge-a-key.pem "$DIR/edge-edge-a-key.pem"
secret iop-edge-b.pem "$DIR/edge-edge-b.pem"
secret iop-edge-b-key.pem "$DIR/edge-edge-b-key.pem"
for rule in gpu cli; do
  secret "iop-enroll-$rule.pem" "$DIR/enroll-$rule.pem"
  secret "iop-enroll-$rule-key.pem" "$DIR/enroll-$rule-key.pem"
done
for name in iop-gpu-token iop-cli-token iop-edge-a-cp-credential iop-edge-b-cp-credential \
  iop-cp-read-token iop-cp-operate-token; do
  secret "$name" "$DIR/tokens/$name"
done
if [ "$keep" -eq 1 ]; then
  echo "swarm_secrets: $created created; CA, certificates and tokens kept in $DIR"
else
  echo "swarm_secrets: $created created; the CA key was not kept (use --dir to keep it)"
fi
