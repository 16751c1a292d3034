"""The job driver: one job from partitioning to its report, as an explicit state machine.

Phases (:class:`Phase`)::

    partitioning -> starting -> running -> done
                       ^  \\        |  \\
                       |   +--> restarting --> failed
                       +--------/

Each step observes the job (the state in Redis, the children that exited) and asks the pure
:func:`~argosy.services.restart_policy.decide` what follows; the driver then carries it out (restart replicas, restart the
trainers from their checkpoint, or end).  ``train`` and ``demo`` drive their own
:class:`~argosy.services.stack.LocalStack`; ``up`` runs ``train`` in the background; ``submit
--wait`` drives a job whose processes were started elsewhere (compose, Kubernetes), with no stack.
"""
from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from argosy.services.job_records import job_epochs, job_metrics, keep_best
from argosy.services.restart_policy import Decision, Exit, Observation, Phase, RestartPolicy, decide
from argosy.shared import envs, rundir
from argosy.shared.config import selection_metric
from argosy.shared.errors import ArgosyError, ConfigError
from argosy.shared.records import JobState
from argosy.shared.store.manifest import Manifest

__all__ = ["JobDriver", "run_local", "run_submitted", "partition_to_store", "preflight_job"]

logger = logging.getLogger("argosy")
_PER_EPOCH = re.compile(r"_e\d+$")
TIMELINE_MAX = 2048
"""Timeline points a driver keeps (one per ~0.5 s poll: ~17 min at full resolution)."""


def _proc_state(pid: int) -> str:
    """``state T (stopped)``-like words from /proc (\"state unknown\" where it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        code = stat[stat.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return "state unknown"
    names = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped by a tracer",
             "Z": "zombie"}
    return f"state {code}: {names.get(code, '?')}"


def _state(raw: str | None) -> JobState | None:
    try:
        return JobState(raw) if raw else None
    except ValueError:
        return None


class _Stop(ArgosyError):
    """SIGTERM or SIGINT reached the launcher."""

    def __init__(self):
        super().__init__("interrupted")


class JobDriver:
    """Watches one job until it is done or failed, applying :func:`decide`.

    Args:
        coord: the job's :class:`~argosy.shared.coord.Coordinator`.
        num_trainers: DDP world size (trainers restart as a whole).
        stack: the local processes (None under ``submit --wait``: processes run elsewhere).
        embedded: the embedded Redis server, restarted from its append-only file if it dies.
        epochs: epochs of the job (progress bar).
        quiet: no progress bar.
        val_metric: what picks the best epoch (the bar shows it): ``accuracy``, or a link job's
            metric (``mrr`` on a knowledge graph), read from the epoch records' ``val_<metric>``.
    """

    def __init__(self, coord, num_trainers: int, stack=None, embedded=None, epochs: int = 0, quiet: bool = True,
                 policy: RestartPolicy = RestartPolicy(), poll: float = 0.5, epoch_log=None,
                 hang_timeout: float | None = None, val_metric: str = "accuracy"):
        self.coord, self.num_trainers, self.stack, self.embedded = coord, num_trainers, stack, embedded
        self.val_metric = val_metric
        self.epoch_log = epoch_log          # a report.EpochLog (TensorBoard), fed every epoch as it arrives
        self.epochs, self.quiet, self.policy, self.poll = epochs, quiet, policy, poll
        self.phase = Phase.STARTING
        self.history: list[Exit] = []
        self.transitions: list[tuple[float, str, str]] = []
        self.trainer_restarts = 0
        self.restarts = 0
        self.timeline: list[dict] = []
        self.reason = ""
        self.exits_seen = 0
        self.hang_timeout = hang_timeout     # a child alive with no heartbeat this long is hung (None: not watched)
        self.beats: dict[str, float] = {}    # child -> when it was last seen in the registry
        self.hung: dict[str, str] = {}       # child -> why the launcher killed it (its exit's last line)
        self.redis_restarts = 0
        self._redis_lock = threading.Lock()
        self._redis_stop = threading.Event()
        self._redis_watch: threading.Thread | None = None
        from argosy.shared.fleet import FleetWatch
        self.fleet = FleetWatch(coord)          # lost replicas: logged and recorded as fleet events

    def _enter(self, phase: Phase, reason: str = "") -> None:
        if phase != self.phase or reason:
            self.transitions.append((time.time(), str(phase), reason))
        self.phase = phase

    def observe(self) -> Observation:
        now = time.time()
        exits = ()
        if self.stack is not None:
            exits = tuple(Exit(sid, code, now, self._last_line(sid), wanted)
                          for sid, code, wanted in self.stack.exits())
        else:               # processes run elsewhere: they record their failed exits in Redis
            recs = self.coord.exits(self.exits_seen)
            self.exits_seen += len(recs)
            exits = tuple(Exit(r["sid"], r["code"], now, r.get("message", "")) for r in recs)
        state = _state(self.coord.get_state())
        res = self.coord.job_result() if state == JobState.FAILED else None
        return Observation(now, state, exits, res and res.error, bool(res and res.extra.get("terminal")))

    def _last_line(self, sid: str) -> str:
        if sid in self.hung:
            return self.hung[sid]
        from argosy.services.stack import log_tail
        return log_tail(self.stack.log_path(sid))[-500:]

    def restart_redis_if_dead(self) -> bool:
        """Restart the embedded Redis server from its append-only file if it exited; True if it did."""
        with self._redis_lock:
            e = self.embedded
            if e is None or e.proc is None or e.proc.poll() is None:
                return False
            logger.warning("the embedded Redis server exited (code %s); restarting it from its append-only file",
                           e.proc.returncode)
            e.start()
            self.redis_restarts += 1
            return True

    def start_redis_watch(self, every: float = 0.25) -> None:
        """Watch the embedded Redis server from a thread of its own.  Checked only between the driver's
        steps, a server killed while the driver was inside a Redis call was never restarted: that call
        retried for its ~60 s against a dead server and the launcher crashed (the one-hour soak, at 39 min)."""
        if self.embedded is None or self._redis_watch is not None:
            return
        self._redis_stop.clear()

        def loop() -> None:
            while not self._redis_stop.wait(every):
                try:
                    self.restart_redis_if_dead()
                except Exception as e:          # logged, tried again at the next tick
                    logger.error("could not restart the embedded Redis server: %s", e)
        self._redis_watch = threading.Thread(target=loop, name="redis-watch", daemon=True)
        self._redis_watch.start()

    def stop_redis_watch(self) -> None:
        """Stop watching (before the launcher stops the server on purpose)."""
        if self._redis_watch is not None:
            self._redis_stop.set()
            self._redis_watch.join(5)
            self._redis_watch = None

    def step(self) -> Decision:
        self.restart_redis_if_dead()
        self.fleet.watch()
        self._kill_hung()
        obs = self.observe()
        d = decide(obs, self.history, self.trainer_restarts, self.policy, orchestrated=self.stack is None)
        self.history += obs.exits
        self._enter(d.phase, d.reason)
        if d.restart_trainers and self.stack is None:     # pods: the orchestrator restarts trainers
            self._enter(Phase.FAILED, d.reason)
            return d
        if self.stack is None:
            return d                # compose / Kubernetes restart replicas themselves
        if d.restart_trainers:
            logger.warning("trainer failure (%s); restarting the trainers from the last checkpoint (attempt %d of %d)",
                           d.reason, self.trainer_restarts + 1, self.policy.max_trainer_restarts)
            self._restart_trainers()
            self._enter(Phase.STARTING)
        for sid in d.restart:
            self.restarts += 1
            role = sid.split("-")[0]
            logger.warning("%s exited; starting a replacement", sid)
            self.stack.start(role, f"{role}-r{self.restarts}")
        if d.restart:
            self._enter(Phase.RUNNING if obs.state == JobState.RUNNING else Phase.STARTING)
        return d

    def _kill_hung(self) -> None:
        """A child whose process lives but whose heartbeat has been gone for ``hang_timeout`` seconds
        (``--peer-timeout``) is hung: stopped (SIGSTOP), deadlocked, or cut off that long.  It is
        SIGKILLed, with one error line naming it, and its exit then follows the usual rules: a
        trainer restarts the trainers from the checkpoint (the job fails, naming it, past
        ``max_trainer_restarts``), a sampler or loader is replaced (its work went to the others when
        its heartbeat stopped).  Without this a trainer stopped for good would stall the job forever."""
        if self.stack is None or not self.hang_timeout:
            return
        now = time.time()
        live = {sid for role in self.fleet.roles for sid in self.fleet.live[role]}
        for sid, p in list(self.stack.procs.items()):
            if sid in live or p.poll() is not None:
                self.beats[sid] = now
                continue
            if sid not in self.beats or sid in self.hung:   # not registered yet (starting), or killed already
                continue
            silent = now - self.beats[sid]
            if silent < self.hang_timeout:
                continue
            self.hung[sid] = (f"{sid} (pid {p.pid}) hung: its process is alive ({_proc_state(p.pid)}) but sent no "
                              f"heartbeat for {silent:.0f} s (--peer-timeout {self.hang_timeout:g}); killed by the launcher")
            logger.error("%s", self.hung[sid])
            self.coord.record_event("hung", sid.split("-")[0], sid, silent_s=round(silent, 1))
            p.kill()
            p.wait()

    def _restart_trainers(self) -> None:
        """Kill what is left of the DDP world and start it again; trainers resume from the checkpoint."""
        self.trainer_restarts += 1
        self.stack.kill_role("trainer")
        self.coord.clear_dist_url()
        cfg = self.coord.get_spec()
        cfg.resume = True
        self.coord.put_spec(cfg)
        self.coord.set_state(JobState.STARTING.value)
        for r in range(self.num_trainers):
            self.stack.start("trainer", f"trainer-{r}-r{self.trainer_restarts}", ["--rank", str(r)])

    def _log_epochs(self, records) -> None:
        if self.epoch_log is not None:
            for e in records:
                self.epoch_log.add(e.to_dict())

    def _sample(self) -> dict:
        """One timeline point: the job's cumulative counters, without the per-epoch ones (``*_e{E}``: a
        sample of an hour-long job would hold thousands, and every poll keeps one sample)."""
        return {"t": time.time(), **{k: v for k, v in self.coord.metrics().items() if not _PER_EPOCH.search(k)}}

    def _record(self) -> None:
        """Append a timeline point; past :data:`TIMELINE_MAX` points every other one is dropped (the
        span is kept at half the resolution), so an hours-long job's timeline stays bounded."""
        self.timeline.append(self._sample())
        if len(self.timeline) > TIMELINE_MAX:
            self.timeline = self.timeline[::2]

    def run(self) -> dict:
        """Drive to the end; returns the job's result (``error`` set when it failed or was stopped)."""
        from tqdm import tqdm
        bar = tqdm(total=self.epochs, unit="epoch", disable=self.quiet, file=sys.stderr, dynamic_ncols=True)
        seen = 0
        self.start_redis_watch()
        try:
            while self.phase not in (Phase.DONE, Phase.FAILED):
                d = self.step()
                if self.phase in (Phase.DONE, Phase.FAILED):
                    break
                first, new = self.coord.epochs_from(seen)     # only the new records: a long job has thousands
                if first > seen:
                    logger.warning("epoch records %d-%d left Redis before the launcher read them (the run "
                                   "dir's %s has them)", seen, first - 1, rundir.HISTORY_FILE)
                    seen = first
                if new:
                    e = new[-1]
                    bar.update(len(new))
                    self._log_epochs(new)
                    seen += len(new)
                    val = e.val_accuracy if self.val_metric == "accuracy" else e.extra.get(f"val_{self.val_metric}")
                    bar.set_postfix({"loss": f"{e.train_loss:.3f}",
                                     "val" if self.val_metric == "accuracy" else f"val_{self.val_metric}":
                                     "-" if val is None else f"{val:.3f}",
                                     "bps": f"{e.batches_per_second:.1f}", "idle": f"{e.trainer_idle_fraction:.0%}"})
                self._record()
                if not d.restart and not d.restart_trainers:
                    time.sleep(self.poll)
            new = self.coord.epochs_from(seen)[1]
            bar.update(len(new))
            self._log_epochs(new)
        finally:
            self.stop_redis_watch()
            bar.close()
            if self.epoch_log is not None:
                self.epoch_log.close()
        self._record()
        result = self.coord.get_result() or {}
        if self.phase == Phase.FAILED:
            self.reason = self.reason or (self.transitions[-1][2] if self.transitions else "failed")
            result = {**result, "error": result.get("error") or self.reason}
            if self.coord.get_state() != JobState.FAILED.value:
                self.coord.set_state(JobState.FAILED.value, result)
        return result


def partition_to_store(data: str, out: Path, parts: int, method: str, seed: int = 0, quiet: bool = False,
                       extra: list[str] | None = None) -> dict:
    """Partition ``data`` into a store; ``extra`` are partitioner flags (node data side files,
    ``--directed``, ``--random-features``: a graph without features gets random ones only when asked)."""
    cmd = [sys.executable, "-m", "argosy.services.partitioner", data, "--parts", str(parts), "--method", method,
           "--out", str(out), "--overwrite", "--json", "--seed", str(seed), *(extra or [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArgosyError(f"partitioning {data} failed:\n{proc.stderr.strip()[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for line in proc.stderr.splitlines():  # the partitioner's warnings reach the user, not its INFO log
        if " WARNING: " in line or "Warning: " in line:
            print("partitioner warning: " + line.split(" WARNING: ", 1)[-1] if " WARNING: " in line else line,
                  file=sys.stderr)
    if not quiet:
        print(f"partitioned {data} with {method} into {parts} parts: edge cut {100 * res['edge_cut_fraction']:.2f}%, "
              f"balance {res['balance']:.3f}, edges per part max {res.get('edge_balance', 0.0):.2f}x mean "
              f"({res['partition_seconds']:.1f} s)", file=sys.stderr)
    return res


def new_job_id() -> str:
    return f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def fullgraph_config(args) -> Path:
    """``train --mode fullgraph|sar|memory``: partition ``--data`` if needed, then write the job and fullgraph
    sections to ``RUN_DIR/fullgraph.json`` for ``python -m argosy.services.trainer.fullgraph --config``."""
    if getattr(args, "task", "node") == "link":
        raise ArgosyError(f"--task link runs in the mini-batch mode only (got --mode {args.mode})")
    from argosy.services.train_args import job_config, node_data_flags, refuse_partition_flags
    from argosy.shared.config import FullGraphConfig
    job = args.job or new_job_id()
    run_dir = Path(args.run_dir or rundir.default_run_dir(job))
    run_dir.mkdir(parents=True, exist_ok=True)
    job_config(args, run_dir / "store", job, run_dir)  # bad flags fail before any partitioning
    if args.store:
        store = Path(args.store)
        refuse_partition_flags(args, store)
    elif args.data:
        store = run_dir / "store"
        partition_to_store(args.data, store, args.parts, args.partition_method, args.seed, args.json,
                           node_data_flags(args))
    else:
        raise ConfigError(f"--mode {args.mode} needs --data FILE or --store DIR")
    cfg = job_config(args, store, job, run_dir)
    fg = FullGraphConfig(mode=args.mode, cache_bytes=args.cache_bytes, spill_dir=args.spill_dir,
                         eviction=args.eviction, prefetch=args.prefetch)
    path = run_dir / "fullgraph.json"
    path.write_text(json.dumps({"job": asdict(cfg), "fullgraph": asdict(fg)}, indent=1))
    return path


def preflight_job(args, cfg, remote: bool = False) -> None:
    """The whole job checked before anything is partitioned, started or written
    (:func:`argosy.shared.preflight.check_job`): every problem in one error."""
    from argosy.shared.preflight import JobInputs, check_job
    if not args.store and not args.data:
        raise ArgosyError("give --data FILE (a graph to partition) or --store DIR (an existing store)")
    side = {k: getattr(args, k, None) for k in ("features", "labels", "train_mask", "val_mask", "test_mask")}
    check_job(cfg, JobInputs(data=None if args.store else args.data, store=args.store, side=side,
                             random_features=getattr(args, "random_features", None),
                             split=getattr(args, "split", None), task=cfg.trainer.task,
                             edge_split=bool(getattr(args, "edge_split", None) or getattr(args, "val_edges", None)
                                             or getattr(args, "test_edges", None))), remote=remote)


def _clean_up(run_dir: Path, created: bool) -> str:
    """After a failure before any service ran: remove the run dir this run created; say what is kept."""
    if created and run_dir.exists():
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
        return f"(removed {run_dir}, which this run had created)"
    return f"(kept {run_dir}: it existed before this run; its store/ may be incomplete)"


def _raise_stop(signum, frame):
    raise _Stop()


def _sampled_eval_out_of_core(args, cfg, store) -> None:
    """One host whose store does not fit its memory budget evaluates with the training fanouts unless
    ``--eval-fanouts`` says otherwise: full neighbourhoods of a power-law graph's hubs are millions of
    rows per batch (they OOM-killed the loader of a 27.8M-vertex job in a 3 GiB cgroup)."""
    if getattr(args, "eval_fanouts", None) is not None or getattr(args, "hosts", 0):
        return
    from argosy.shared.store import PartitionStore
    from argosy.shared.store.residency import plan_residency
    st = PartitionStore(store)
    res = plan_residency(st, range(st.num_parts), cfg.memory_budget)
    if res.fits or all(f != -1 for f in cfg.sampler.eval_fanouts):
        return
    cfg.sampler.eval_fanouts = tuple(cfg.sampler.fanouts)
    print(f"argosy: the store is out of core here ({res.describe()}): validation and test are sampled with "
          f"the training fanouts {','.join(map(str, cfg.sampler.fanouts))} (pass --eval-fanouts -1,... for full "
          "neighbourhoods)", file=sys.stderr)


def run_local(args) -> dict:
    """``train``/``demo``: partition (if needed), start Redis (if needed) and every role, drive to the end, report.

    SIGTERM and SIGINT stop the job the same way: state ``stopping``, every child drained (then
    killed), the report written, Redis stopped last.
    """
    from argosy.services.stack import LocalStack
    from argosy.services.train_args import job_config, node_data_flags, refuse_partition_flags
    from argosy.shared.coord import Coordinator, redact_url
    from argosy.shared.metrics import read_autoscale_decisions
    from argosy.shared.redis_server import EmbeddedRedis
    from argosy.shared.report import EpochLog
    from argosy.shared.preflight import check_trainable
    from argosy.shared.store import PartitionStore
    from argosy.shared.usermodel import record_source

    job = args.job or new_job_id()
    run_dir = Path(args.run_dir or rundir.default_run_dir(job))
    created = not run_dir.exists()
    if getattr(args, "resume", False) and not args.store and (run_dir / "store" / "manifest.json").exists():
        args.store = str(run_dir / "store")
    if getattr(args, "resume", False) and not rundir.checkpoint_path(run_dir).exists():
        raise ArgosyError(f"--resume: no checkpoint in {run_dir} (pass the --run-dir of the interrupted run)")
    preflight_job(args, job_config(args, run_dir / "store", job, run_dir))   # nothing written before this
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    embedded = stack = driver = netsim = None
    result, epochs, autoscale, events, t_start = {}, [], [], [], time.time()
    try:
        part_res = None
        transitions = [(time.time(), str(Phase.PARTITIONING), "")]
        if args.store:
            store = Path(args.store)
            PartitionStore(store)                     # fails early with a clear message
            refuse_partition_flags(args, store)
        elif args.data:
            if not Path(args.data).exists():
                raise ArgosyError(f"{args.data}: no such file")
            store = run_dir / "store"
            try:
                part_res = partition_to_store(args.data, store, args.parts, args.partition_method, args.seed,
                                              args.json, node_data_flags(args))
            except ArgosyError as e:
                raise ArgosyError(f"{e}\n{_clean_up(run_dir, created)}") from None
        else:
            raise ArgosyError("give --data FILE (a graph to partition) or --store DIR (an existing store)")
        cfg = job_config(args, store, job, run_dir)
        cfg.resume = bool(getattr(args, "resume", False))
        _sampled_eval_out_of_core(args, cfg, store)
        try:
            check_trainable(store, cfg)           # before any service starts: no silent fallbacks
        except ArgosyError as e:
            raise type(e)(f"{e}\n{_clean_up(run_dir, created)}") from None
        record_source(run_dir, cfg.trainer.model)  # predict imports a MODULE:FACTORY module as train did
        url = args.redis or envs.get(envs.REDIS_URL)
        if getattr(args, "hosts", 0):              # simulated hosts: namespaces, shaped links, Redis in its own
            from argosy.services.netsim import NamespacedRedis, NetSim, make_stack, parse_rate
            if url:
                raise ArgosyError("--hosts runs its own Redis in a namespace; drop --redis / $ARGOSY_REDIS_URL")
            cfg.num_samplers, cfg.num_loaders = max(cfg.num_samplers, args.hosts), max(cfg.num_loaders, args.hosts)
            netsim = NetSim(args.hosts, parse_rate(args.link_rate), args.link_delay,
                            parse_rate(args.trainer_link_rate)).start()
            embedded = NamespacedRedis(netsim, str((run_dir / "redis").resolve())).start()
            url = embedded.url
            stack = make_stack(netsim, job, url, run_dir, netsim.stage(store, run_dir / "hosts"), embedded.proc.pid)
        if not url:
            # append-only file in the run dir: if the server dies, the driver restarts it with the job's state
            embedded = EmbeddedRedis(data_dir=str((run_dir / "redis").resolve())).start()
            url = embedded.url
        if stack is None:
            stack = LocalStack(job, url, run_dir, redis_pid=embedded.proc.pid if embedded else None)
        coord = Coordinator(url, job)
        coord.delete_job()
        coord.put_spec(cfg)
        coord.set_state(JobState.STARTING.value)
        if not args.json:
            print(f"job {job}: {cfg.num_samplers} sampler(s), {cfg.num_loaders} loader(s), {cfg.num_trainers} "
                  f"trainer(s); Redis {redact_url(url)}{' (embedded)' if embedded else ''}; logs in {run_dir / 'logs'}",
                  file=sys.stderr)
        epoch_log = EpochLog(run_dir)
        driver = JobDriver(coord, cfg.num_trainers, stack, embedded, cfg.trainer.epochs, quiet=args.json,
                           epoch_log=epoch_log, hang_timeout=cfg.coord.peer_timeout,
                           val_metric=selection_metric(cfg.trainer.task, cfg.link.metric,
                                                       bool(Manifest.load(store).typed.get("triples"))))
        driver.transitions = transitions + [(time.time(), str(Phase.STARTING), "")]
        services_started = time.time()
        try:
            stack.start_all(cfg.num_trainers, cfg.num_loaders, cfg.num_samplers)
            result = driver.run()
        except _Stop:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            coord.set_state(JobState.STOPPING.value)
            result = {"error": "interrupted"}
            driver._enter(Phase.FAILED, "interrupted")
        if driver.phase == Phase.FAILED and result.get("error") != "interrupted":
            print(f"argosy: job {job} failed: {result.get('error')}", file=sys.stderr)
        stack.stop()
        try:
            from argosy.shared.store.residency import disk_summary
            from argosy.shared.traffic import wire_summary
            metrics = job_metrics(coord, run_dir)
            result = {**result, **wire_summary(metrics), **disk_summary(metrics)}
            epochs = job_epochs(coord, run_dir)
            autoscale = read_autoscale_decisions(coord)
            from argosy.shared.fleet import fleet_events, fleet_summary
            events = fleet_events(coord)
            result = {**result, **fleet_summary(coord)}
        except ArgosyError:
            pass
        result = keep_best(result, epochs, run_dir, coord.best_epoch())
        result["tensorboard"] = str(epoch_log.path) if epoch_log.path else epoch_log.why
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if stack is not None:
            stack.stop()
        if embedded:
            embedded.stop()
        if stack is not None:
            stack.close()
        if netsim is not None:
            netsim.close()
        for s, h in previous.items():
            signal.signal(s, h)
    from argosy.shared.report import write_report
    if netsim is not None:
        result["hosts"] = {"count": netsim.hosts, "link_rate_bits": netsim.rate, "link_delay": netsim.delay,
                           "trainer_link_rate_bits": netsim.trainer_rate}
    result = {**result, "wall_seconds": time.time() - t_start, "restarts": driver.restarts,
              "trainer_restarts": driver.trainer_restarts,
              "edge_weights": cfg.trainer.edge_weights_used(_store_weighted(store))}
    extra = {"job": job, "store": str(store), "config": json.loads(cfg.to_json()), "partition": part_res,
             "autoscale": autoscale, "events": events, "services_started": services_started,
             "phases": [{"t": t, "phase": p, "reason": r} for t, p, r in driver.transitions]}
    report = write_report(run_dir, result, epochs, driver.timeline, extra)
    result["report"] = str(report)
    return result


def _store_weighted(store) -> bool | None:
    """Whether the store holds edge weights (None: its manifest cannot be read from here)."""
    try:
        return Manifest.load(store).edge_weights
    except (ArgosyError, OSError, ValueError):
        return None


def run_submitted(coord, cfg, run_dir: Path, store: str) -> dict:
    """``submit --wait``: drive a job whose processes run elsewhere until it ends; write its report."""
    from argosy.shared.fleet import fleet_events, fleet_summary
    from argosy.shared.metrics import read_autoscale_decisions
    from argosy.shared.report import write_report
    t0 = time.time()
    driver = JobDriver(coord, cfg.num_trainers, stack=None, quiet=True, poll=1.0)
    result = driver.run()
    epochs = job_epochs(coord, run_dir)
    result = {**keep_best(result, epochs, run_dir, coord.best_epoch()), **fleet_summary(coord), "wall_seconds": time.time() - t0,
              "edge_weights": cfg.trainer.edge_weights_used(_store_weighted(store))}
    report = write_report(run_dir, result, epochs, driver.timeline,
                          {"job": cfg.job, "store": store, "config": json.loads(cfg.to_json()),
                           "autoscale": read_autoscale_decisions(coord), "events": fleet_events(coord),
                           "phases": [{"t": t, "phase": p, "reason": r} for t, p, r in driver.transitions]})
    result["report"] = str(report)
    return result
