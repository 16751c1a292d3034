"""Memory probe for the soak's services (not part of the package; on PYTHONPATH only when PROBE_DIR is set).

In a service process whose id is one of PROBE_ROLES (default "trainer,loader"), every PROBE_EVERY s
(default 15) write one JSON line to $PROBE_DIR/ROLE-PID.jsonl: RSS split as the kernel counts it
(``RssAnon``: heap and anonymous mappings; ``RssFile``: mapped files such as the store's feature
files and the shared libraries), glibc's own count (``mallinfo2`` over every arena: ``arena`` bytes
the heaps hold, ``uordblks`` in use, ``fordblks`` free, ``hblkhd`` in mmapped chunks, ``keepcost``
trimmable top) and ``sys.getallocatedblocks()``.  With PROBE_TRACE=1, tracemalloc (4 frames) starts
after PROBE_WARM s (default 150) and each line also has the traced bytes and the top allocation
sites against the first snapshot.  With PROBE_TRIM_EVERY_S the trainer's heap-trim period
(``HEAP_TRIM_EVERY_S``) is set for the run, and each trim's seconds and RSS before/after are recorded.  With
PROBE_MALLOPT="arena_max=N,mmap_threshold=BYTES,trim_threshold=BYTES,top_pad=BYTES" the trainer's glibc settings are changed for
the run (arena_max at start, before any thread; the thresholds again at every sample, so they override what the
trainer set itself).  Usage: ``PROBE_DIR=/tmp/p PYTHONPATH=bench/memprobe python bench/faults_soak.py ...``
"""
import os
import sys

_ROLES = [r for r in os.environ.get("PROBE_ROLES", "trainer,loader").split(",") if r]
_ARGV = " ".join(sys.argv)
# under ``python -m`` the module name is not in argv yet when this runs; the service id is (``--id trainer-0``)
_ROLE = next((r for r in _ROLES if f"--id {r}" in _ARGV), None)
if _ROLE and os.environ.get("PROBE_DIR"):
    import ctypes
    import json
    import threading
    import time

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                  "fsmblks", "uordblks", "fordblks", "keepcost")]

    def _mallinfo() -> dict:
        try:
            f = ctypes.CDLL("libc.so.6").mallinfo2
            f.restype = _MallInfo2
            m = f()
            return {k: int(getattr(m, k)) for k in ("arena", "hblkhd", "uordblks", "fordblks", "keepcost", "ordblks")}
        except (OSError, AttributeError):
            return {}

    def _status() -> dict:
        out = {}
        with open("/proc/self/status") as f:
            for ln in f:
                k, _, v = ln.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmSize"):
                    out[k] = int(v.split()[0]) * 1024
        return out

    def _stat() -> dict:
        with open("/proc/self/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return {"minflt": int(v[7]), "cpu_s": (int(v[11]) + int(v[12])) / tck}

    trims: list = []
    _OPTS = {"arena_max": -8, "mmap_threshold": -3, "trim_threshold": -1, "top_pad": -2}
    _MALLOPT = {k: int(v) for k, _, v in (kv.partition("=") for kv in os.environ.get("PROBE_MALLOPT", "").split(",") if kv)}
    _MALLOPT = _MALLOPT if _ROLE == "trainer" else {}

    def _mallopt(names) -> None:
        lib = ctypes.CDLL("libc.so.6")
        for k in names:
            if k in _MALLOPT:
                lib.mallopt(_OPTS[k], _MALLOPT[k])
    _mallopt(["arena_max"])

    def _patch_trim() -> None:
        """PROBE_TRIM_EVERY_S: the trainer's heap-trim period for this run (0: every epoch); each trim's
        seconds and RSS before/after go into the next line's ``trims``."""
        every = os.environ.get("PROBE_TRIM_EVERY_S")
        for _ in range(600):
            mod = sys.modules.get("argosy.services.trainer.service")
            # the class is defined after the module's constants: set earlier, the import would overwrite them
            if mod is not None and hasattr(mod, "TrainerProc"):
                break
            time.sleep(0.5)
        else:
            return
        if every is not None:
            mod.HEAP_TRIM_EVERY_S = float(every)
        orig = mod.trim_heap

        def timed() -> None:
            a, t = _status()["VmRSS"], time.perf_counter()
            orig()
            trims.append((round(time.perf_counter() - t, 4), a, _status()["VmRSS"]))
        mod.trim_heap = timed

    def _loop() -> None:
        every = float(os.environ.get("PROBE_EVERY", "15"))
        trace = os.environ.get("PROBE_TRACE") == "1"
        warm = float(os.environ.get("PROBE_WARM", "150"))
        out = open(os.path.join(os.environ["PROBE_DIR"], f"{_ROLE}-{os.getpid()}.jsonl"), "a")
        t0 = time.time()
        base = None
        while True:
            _mallopt(["mmap_threshold", "trim_threshold", "top_pad"])
            rec = {"t": time.time(), "age": time.time() - t0, **_status(), **_mallinfo(), **_stat(),
                   "blocks": sys.getallocatedblocks(), "trims": trims[:], "mallopt": _MALLOPT}
            del trims[:len(rec["trims"])]
            if trace and rec["age"] >= warm:
                import tracemalloc
                if not tracemalloc.is_tracing():
                    tracemalloc.start(4)
                else:
                    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
                    rec["traced"] = tracemalloc.get_traced_memory()[0]
                    if base is None:
                        base = snap
                    else:
                        rec["diff"] = [(" <- ".join(x.strip()[:120] for x in s.traceback.format(most_recent_first=True)[:8]),
                                        s.size_diff, s.count_diff) for s in snap.compare_to(base, "traceback")[:12]]
            out.write(json.dumps(rec) + "\n")
            out.flush()
            time.sleep(every)

    threading.Thread(target=_loop, daemon=True, name="mem-probe").start()
    if _ROLE == "trainer":
        threading.Thread(target=_patch_trim, daemon=True, name="mem-probe-trim").start()
