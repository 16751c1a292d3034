#!/bin/sh
# Entrypoint of every Argosy image.
#
#   sampler|loader|trainer [ARGS]  python -m argosy.services.<role> --id <ARGOSY_SERVICE_ID or role-$HOSTNAME> ARGS
#   offload [ARGS]                 python -m argosy.services.offload ARGS
#   partition-job                  generate a demo graph if needed, partition it into $ARGOSY_STORE
#   anything else                  exec'd as is (e.g. `argosy submit ...`, `bash`)
#   (no arguments)                 the image's role ($ARGOSY_ROLE, set by docker/Dockerfile) with its defaults
#
# ARGOSY_ADVERTISE_HOST (the address peers connect to) defaults to this container's IP address:
# under compose there is no stable per-replica DNS name, and under Kubernetes the chart sets it
# from the pod IP (downward API).
set -e
if [ -z "${ARGOSY_ADVERTISE_HOST:-}" ] || [ "${ARGOSY_ADVERTISE_HOST}" = auto ]; then
    ARGOSY_ADVERTISE_HOST=$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')
    export ARGOSY_ADVERTISE_HOST
fi
# numba kernels compiled at image build time (`argosy warmup --role`) into the writable cache dir
if [ -d /opt/numba-cache ] && [ -n "${NUMBA_CACHE_DIR:-}" ] && [ ! -e "$NUMBA_CACHE_DIR" ]; then
    cp -a /opt/numba-cache "$NUMBA_CACHE_DIR" 2>/dev/null || true
fi
host=${HOSTNAME:-$(cat /etc/hostname)}
if [ $# -eq 0 ]; then
    case "${ARGOSY_ROLE:-}" in
        sampler|loader|trainer) set -- "$ARGOSY_ROLE" ;;
        partitioner) set -- partition-job ;;
        offload) set -- offload --bind tcp://0.0.0.0:5580 --spill-dir /data/spill --cache-bytes 1G ;;
        *) echo "no command given and ARGOSY_ROLE=${ARGOSY_ROLE:-} is not a role" >&2; exit 64 ;;
    esac
fi
case "${1:-}" in
    sampler|loader|trainer)
        role=$1; shift
        # jemalloc preloaded where installed, as the local launcher does (shared/malloc.py: allocator_env)
        alloc=$(python -m argosy.shared.malloc --shell) || exit 64
        eval "$alloc"
        exec python -m "argosy.services.$role" --id "${ARGOSY_SERVICE_ID:-$role-$host}" "$@" ;;
    offload)
        shift
        exec python -m argosy.services.offload "$@" ;;
    partition-job)
        shift
        exec /app/docker/partition-job.sh "$@" ;;
esac
exec "$@"
