"""Trainer memory probe (not part of the repo): in a process whose argv names the trainer service, after
PROBE_WARM s start tracemalloc (depth 4) and every PROBE_EVERY s write RSS, traced bytes, allocated
blocks and the top allocation sites against the first snapshot to $PROBE_DIR/trainer-PID.jsonl."""
import os, sys
if "trainer" in " ".join(sys.argv) and os.environ.get("PROBE_DIR"):
    import threading, time, json, tracemalloc
    def _rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    def loop():
        every = float(os.environ.get("PROBE_EVERY", "60"))
        out = open(os.path.join(os.environ["PROBE_DIR"], f"trainer-{os.getpid()}.jsonl"), "a")
        t0 = time.time()
        out.write(json.dumps({"t": 0, "rss": _rss(), "blocks": sys.getallocatedblocks()}) + "\n"); out.flush()
        time.sleep(float(os.environ.get("PROBE_WARM", "150")))
        tracemalloc.start(4)
        base = None
        while True:
            time.sleep(every)
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            rec = {"t": time.time() - t0, "rss": _rss(), "traced": tracemalloc.get_traced_memory()[0],
                   "blocks": sys.getallocatedblocks()}
            if base is None:
                base = snap
            else:
                rec["diff"] = [(" <- ".join(x.strip()[:120] for x in s.traceback.format(most_recent_first=True)[:8]),
                                s.size_diff, s.count_diff) for s in snap.compare_to(base, "traceback")[:12]]
            out.write(json.dumps(rec) + "\n"); out.flush()
    threading.Thread(target=loop, daemon=True, name="mem-probe").start()
