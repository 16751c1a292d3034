#!/usr/bin/env bash
# Make a Docker engine answer on this machine for the compose stack test (tests/deploy/test_docker_stack.py),
# and the local images it builds from when no registry is reachable.
#
#   source <(bash ci/docker_engine.sh)      # prints `export ...` lines for compose and the test; exit 1 = no engine
#
# Steps, each skipped when already done: apt-get install docker.io + debootstrap; start dockerd (no
# systemd here: started by hand, data under $ARGOSY_DOCKER_ROOT, default /var/lib/argosy-docker);
# when `python:3.11-slim` cannot be pulled, build a local base image `debian-py:bookworm` with
# debootstrap and a Redis image from it (docker/redis.Dockerfile). Progress goes to stderr; stdout
# carries only the exports. Any step that fails says why on stderr and exits 1: the caller prints it,
# the test then fails (ARGOSY_REQUIRE_DOCKER=1), nothing passes silently.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=${ARGOSY_DOCKER_ROOT:-/var/lib/argosy-docker}
log() { echo "docker-engine: $*" >&2; }
fail() { log "$*"; exit 1; }

if ! docker info > /dev/null 2>&1; then
    if ! command -v dockerd > /dev/null || ! command -v debootstrap > /dev/null; then
        [ "$(id -u)" = 0 ] || fail "not root: cannot apt-get install docker.io (install Docker and rerun)"
        log "installing docker.io and debootstrap with apt-get"
        { apt-get update -q && apt-get install -y -q --no-install-recommends docker.io debootstrap iptables; } > /tmp/argosy-apt.log 2>&1 \
            || fail "apt-get install docker.io failed: $(tail -n 3 /tmp/argosy-apt.log)"
    fi
    mkdir -p "$ROOT"
    log "starting dockerd (data root $ROOT, log $ROOT/dockerd.log)"
    nohup dockerd --data-root "$ROOT/root" --exec-root "$ROOT/exec" --pidfile "$ROOT/docker.pid" \
        -H unix:///var/run/docker.sock --default-ulimit nofile=4096:4096 --default-ulimit nproc=4096:4096 \
        > "$ROOT/dockerd.log" 2>&1 &
    for _ in $(seq 60); do docker info > /dev/null 2>&1 && break; sleep 1; done
    docker info > /dev/null 2>&1 || fail "dockerd did not answer within 60 s: $(tail -n 5 "$ROOT/dockerd.log")"
fi
log "engine $(docker version --format '{{.Server.Version}}')"

BASE=python:3.11-slim REDIS=redis:7.4-alpine
if ! docker image inspect "$BASE" > /dev/null 2>&1 && ! timeout 60 docker pull -q "$BASE" > /dev/null 2>&1; then
    BASE=debian-py:bookworm
    if ! docker image inspect "$BASE" > /dev/null 2>&1; then
        log "no registry: building $BASE with debootstrap (about 2 minutes)"
        rm -rf "$ROOT/rootfs"
        debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,libjemalloc2 bookworm \
            "$ROOT/rootfs" http://deb.debian.org/debian > "$ROOT/debootstrap.log" 2>&1 \
            || fail "debootstrap failed: $(tail -n 3 "$ROOT/debootstrap.log")"
        tar -C "$ROOT/rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE" > /dev/null \
            || fail "docker import of the debootstrap rootfs failed"
        rm -rf "$ROOT/rootfs"
    fi
fi
if ! docker image inspect "$REDIS" > /dev/null 2>&1 && ! timeout 60 docker pull -q "$REDIS" > /dev/null 2>&1; then
    REDIS=argosy-redis:local
    if ! docker image inspect "$REDIS" > /dev/null 2>&1; then
        log "building $REDIS from $BASE"
        DOCKER_BUILDKIT=0 docker build -q -f docker/redis.Dockerfile --build-arg BASE_IMAGE="$BASE" -t "$REDIS" docker \
            > "$ROOT/redis-build.log" 2>&1 || fail "building the Redis image failed: $(tail -n 3 "$ROOT/redis-build.log")"
    fi
fi
log "base image $BASE, redis image $REDIS"
# What an offline build needs in its context (docs/deploy.md, "Offline"): say so here, before a build that
# would spend minutes retrying PyPI through a TLS-inspecting proxy and then find no numpy wheel. (The compose
# stack tests copy both into a build context of their own; these notes are for compose run by hand.)
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ] && ! ls docker/certs/*.crt > /dev/null 2>&1; then
    log "note: pip here trusts $PIP_CERT (a TLS-inspecting proxy?) but docker/certs/ has no *.crt: image builds"
    log "      will not reach PyPI; first: cp $PIP_CERT docker/certs/host-ca.crt"
fi
host_wheel=$(ls /opt/wheels/torch-*+cpu-*.whl 2> /dev/null | tail -n 1)
if [ -n "$host_wheel" ] && ! ls docker/wheels/torch-*.whl > /dev/null 2>&1; then
    log "note: docker/wheels/ has no torch wheel: the trainer image will fetch torch from the PyTorch index;"
    log "      offline, first: ln $host_wheel docker/wheels/"
fi
# What compose reads (ARGOSY_BASE_IMAGE, REDIS_IMAGE; the classic builder when there is no buildx plugin)
# and what the compose stack test reads (ARGOSY_TEST_*).
builder=""
docker buildx version > /dev/null 2>&1 || builder=" DOCKER_BUILDKIT=0"
# A torch wheel in docker/wheels/ (offline: no PyTorch index) is the one the trainer image installs.
torch=""
wheel=$(ls docker/wheels/torch-*.whl 2> /dev/null | tail -n 1)
[ -n "$wheel" ] && torch=" ARGOSY_TORCH_SPEC=torch==$(basename "$wheel" | cut -d- -f2) ARGOSY_TORCH_INDEX_URL="
echo "export ARGOSY_BASE_IMAGE=$BASE REDIS_IMAGE=$REDIS$builder$torch"
echo "export ARGOSY_TEST_BASE_IMAGE=$BASE ARGOSY_TEST_REDIS_IMAGE=$REDIS ARGOSY_REQUIRE_DOCKER=1"
