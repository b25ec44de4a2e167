# IOP Control Plane image: HTTP 8090 (API, dashboard, /healthz), edge wire 7200.
# Builds with no network: deploy/build_images.sh resolves dependencies on the host
# (node_modules + .deno_cache) and this file only copies them in.
#   docker build --network none --build-arg DENO_IMAGE=iop/deno-base:2.9.6 \
#     -f Dockerfile.cp -t iop/cp:dev .
# Config is a mounted file at /etc/iop/cp.yaml; IOP_* environment variables override it.
ARG DENO_IMAGE=denoland/deno:2.9.6
FROM ${DENO_IMAGE}

# Everything up to the services/ copy is identical in the three Dockerfiles, so the build cache
# shares those layers (node_modules is stored once for all tiers).
# A fixed uid/gid (10001) so mounted volumes get predictable ownership; /etc/passwd is written
# directly because not every base image has useradd. /etc/iop/certs belongs to the service user
# so that a named volume mounted there (the fleet's certificates) is writable by the `certs` tool.
RUN set -e; \
    grep -q '^iop:' /etc/group || echo 'iop:x:10001:' >> /etc/group; \
    grep -q '^iop:' /etc/passwd || \
      echo 'iop:x:10001:10001:IOP service:/var/lib/iop:/usr/sbin/nologin' >> /etc/passwd; \
    mkdir -p /app /etc/iop/certs /var/lib/iop; \
    chown 10001:10001 /var/lib/iop /etc/iop/certs; \
    chmod 0750 /var/lib/iop; \
    chmod 0700 /etc/iop/certs

# Code and dependencies stay root-owned and read-only for the service user; Deno runs fine
# with a read-only DENO_DIR and node_modules.
ENV DENO_DIR=/app/.deno_cache \
    DENO_NO_UPDATE_CHECK=1 \
    DENO_NO_PROMPT=1 \
    HOME=/var/lib/iop
WORKDIR /app
COPY deno.json deno.lock ./
COPY node_modules ./node_modules
COPY .deno_cache ./.deno_cache
COPY shared ./shared
COPY proto/gen ./proto/gen
COPY services/cp ./services/cp
# The certificate tool (`deno task certs`), so a fleet can make its CA and certificates from
# this image (compose/fleet.yaml's `certs` service does).
COPY deploy/certs.ts deploy/fleet_certs.ts ./deploy/

# Containers listen on all interfaces (services bind loopback by default); state files go to
# the writable /var/lib/iop. Environment overrides the mounted config file.
ENV IOP_CP_HTTP_HOST=0.0.0.0 \
    IOP_CP_WIRE_HOST=0.0.0.0 \
    IOP_CP_AUDIT_PATH=/var/lib/iop/cp-audit.sqlite
USER 10001:10001
EXPOSE 8090 7200

# deno eval needs no extra tools in the image; the port follows the env override if one is set.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
  CMD ["deno", "eval", "--no-config", "const p = Deno.env.get('IOP_CP_HTTP_PORT') ?? '8090'; try { const r = await fetch('http://127.0.0.1:' + p + '/healthz', { signal: AbortSignal.timeout(2500) }); Deno.exit(r.ok ? 0 : 1); } catch { Deno.exit(1); }"]

# --cached-only: never reach for the network at start (air-gapped hosts, compose networks).
CMD ["deno", "run", "--cached-only", "-A", "services/cp/main.ts", "--config", "/etc/iop/cp.yaml"]
