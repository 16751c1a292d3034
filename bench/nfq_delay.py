"""A netem ``delay`` stand-in for kernels without ``sch_netem``: every packet that iptables sends to NFQUEUE
``QUEUE`` is held DELAY +- JITTER ms (uniform), then accepted.

Why: ``bench/faults.py``'s ``delay`` scenario (100 ms +- 20 ms on one simulated host's link, both ways) needs
real delayed packets, and this project's kernel has no netem qdisc; it does have ``nfnetlink_queue``.  Run
inside the host's network namespace (the queue is per namespace); the iptables rules send it the packets
(``--queue-bypass``: with no reader, packets pass).  Release times never go backwards, so packets keep their
order (a path whose delay varies, not a reordering link).  SIGTERM: every held packet is accepted at once,
then the process exits (nothing is dropped when the fault ends).

Needs ``NetfilterQueue`` (PyPI; builds against Debian's ``libnetfilter-queue-dev``).

Usage: python bench/nfq_delay.py QUEUE DELAY_MS JITTER_MS
"""
from __future__ import annotations

import heapq
import random
import signal
import sys
import threading
import time


def main() -> int:
    from netfilterqueue import COPY_META, NetfilterQueue

    queue, delay, jitter = int(sys.argv[1]), float(sys.argv[2]) / 1e3, float(sys.argv[3]) / 1e3
    rng = random.Random(queue)
    held: list = []
    cv = threading.Condition()
    state = {"last": 0.0, "seq": 0, "stop": False, "passed": 0}

    def on_packet(pkt) -> None:
        with cv:
            due = max(time.monotonic() + rng.uniform(delay - jitter, delay + jitter), state["last"])
            state["last"] = due
            state["seq"] += 1
            heapq.heappush(held, (due, state["seq"], pkt))
            cv.notify()

    def release() -> None:
        while True:
            with cv:
                while held and not state["stop"] and held[0][0] > time.monotonic():
                    cv.wait(held[0][0] - time.monotonic())
                if not held and not state["stop"]:
                    cv.wait(0.1)
                    continue
                if not held:
                    return
                _, _, pkt = heapq.heappop(held)
            pkt.accept()
            state["passed"] += 1

    def on_term(signum, frame) -> None:
        with cv:
            state["stop"] = True
            cv.notify()
        raise SystemExit(0)

    nfq = NetfilterQueue()
    nfq.bind(queue, on_packet, mode=COPY_META)
    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    signal.signal(signal.SIGTERM, on_term)
    print(f"nfq_delay: queue {queue}, {delay * 1e3:g} +- {jitter * 1e3:g} ms", flush=True)
    try:
        nfq.run()
    except SystemExit:
        pass
    finally:
        with cv:
            state["stop"] = True
            cv.notify()
        releaser.join(5)
        nfq.unbind()
        print(f"nfq_delay: {state['passed']} packets delayed", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
