"""Container health probe for Argosy services (compose healthcheck, Kubernetes exec probes).

``python /app/docker/healthcheck.py ready``: exit 0 when this service's heartbeat key is in Redis,
or when there is nothing to be registered for yet (no job spec, or the job is over).
``python /app/docker/healthcheck.py live``: exit 1 only when the job is running and this
service's heartbeat has expired (its threads are wedged); Redis being unreachable is *not* this
container's fault, so it counts as alive (restarting every pod would not help).

The service id is worked out exactly as ``docker/entrypoint.sh`` does: ``$ARGOSY_SERVICE_ID``,
else ``<role>-$HOSTNAME``; the role comes from ``$ARGOSY_ROLE`` (set in each image).
Redis is read through :meth:`Coordinator.probe` (one round trip, no retries); the probe only reads.
"""
from __future__ import annotations

import socket
import sys

from argosy.shared import envs
from argosy.shared.coord import Coordinator
from argosy.shared.errors import CoordinationError
from argosy.shared.records import STOP_STATES, JobState, Role


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "ready"
    role = envs.get(envs.ROLE) or ""
    url = envs.get(envs.REDIS_URL)
    if role not in {r.value for r in Role} or not url:
        return 0                                   # nothing to check beyond "the process runs"
    job = envs.get(envs.JOB)
    sid = envs.get(envs.SERVICE_ID) or f"{role}-{envs.get(envs.HOSTNAME) or socket.gethostname()}"
    try:
        coord = Coordinator(url, job, connect_timeout=0, retries=0, socket_timeout=2.0)
        state, has_spec, registered = coord.probe(role, sid)
    except CoordinationError as e:
        print(f"redis unreachable: {e}")
        return 0 if mode == "live" else 1
    if registered or not has_spec or state in {s.value for s in STOP_STATES}:
        return 0
    if mode == "live" and state != JobState.RUNNING.value:
        return 0                                   # starting up: loading the store, waiting for peers
    print(f"{sid}: no heartbeat in Redis for job {job} (state {state})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
