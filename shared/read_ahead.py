"""Reading ahead on a helper thread: the next item of a stream (an edge chunk read from disk)
is produced while the consumer works on this one.

Why this module exists: the store writer and the partitioner's on-disk regrouping both read
chunks (file reads and numpy casts release the GIL) and then process them in compiled code; one
helper overlaps the two, with at most ``depth + 1`` items alive.
"""

from __future__ import annotations

__all__ = ["read_ahead"]


def read_ahead(items, depth: int = 1, name: str = "argosy-read-ahead"):
    """Yield ``items`` as they are, produced up to ``depth`` ahead on a helper thread (its
    exceptions re-raised here; stopping early stops it after its current item).  At most
    ``depth + 1`` items are alive: the helper takes the next one only when one has been taken
    from it (a queue of ``depth`` let it hold one more, blocked on a full queue: one more
    edge chunk of the store writer's peak)."""
    import queue
    import threading

    q: queue.Queue = queue.Queue()
    room = threading.Semaphore(depth)
    stop = threading.Event()
    end = object()

    def run():
        try:
            it = iter(items)
            while not stop.is_set():
                if not room.acquire(timeout=0.1):
                    continue
                x = next(it, end)
                q.put((x, None))
                if x is end:
                    return
        except BaseException as e:  # handed to the consumer
            q.put((end, e))

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    try:
        while True:
            x, err = q.get()
            room.release()
            if x is end:
                if err is not None:
                    raise err
                return
            yield x
            del x
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
                room.release()
            except queue.Empty:
                pass
            t.join(0.05)
