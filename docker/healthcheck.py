"""Container health probe for Argosy services (compose healthcheck, Kubernetes exec probes).

``python /app/docker/healthcheck.py ready``: exit 0 when this service's heartbeat key is in Redis,
or when there is nothing to be registered for yet (no job spec, or the job is over).
``python /app/docker/healthcheck.py live``: exit 1 only when the job is running and this
service's heartbeat has expired (its threads are wedged); Redis being unreachable is *not* this
container's fault, so it counts as alive (restarting every pod would not help).

The service id is worked out exactly as ``docker/entrypoint.sh`` does: ``$ARGOSY_SERVICE_ID``,
else ``<role>-$HOSTNAME``; the role comes from ``$ARGOSY_ROLE`` (set in each image).
Key names come from :mod:`shared.keys`; the probe only reads.
"""
from __future__ import annotations

import os
import socket
import sys

import redis

from argosy.shared import keys


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "ready"
    role = os.environ.get("ARGOSY_ROLE", "")
    job = os.environ.get("ARGOSY_JOB", "default")
    url = os.environ.get("ARGOSY_REDIS_URL")
    if role not in ("sampler", "loader", "trainer") or not url:
        return 0                                   # nothing to check beyond "the process runs"
    sid = os.environ.get("ARGOSY_SERVICE_ID") or f"{role}-{os.environ.get('HOSTNAME') or socket.gethostname()}"
    try:
        r = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        state = r.get(keys.state(job))
        has_spec = r.exists(keys.spec(job))
        registered = r.exists(keys.service(job, role, sid))
    except redis.RedisError as e:
        print(f"redis unreachable: {e}")
        return 0 if mode == "live" else 1
    state = state.decode() if state else None
    if registered or not has_spec or state in ("done", "failed", "stopping"):
        return 0
    if mode == "live" and state != "running":
        return 0                                   # starting up: loading the store, waiting for peers
    print(f"{sid}: no heartbeat in Redis for job {job} (state {state})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
