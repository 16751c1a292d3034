"""The one periodic heap trim every throughput process runs (trainer at an epoch's end, sampler and
loader in their busy loop): it trims when its period has passed, and only then."""
import subprocess
import sys

from argosy.shared.malloc import HEAP_TRIM_EVERY_S, HeapTrimmer


def test_trims_once_per_period():
    h = HeapTrimmer(every_s=60.0)
    t0 = h.last
    assert h.maybe(t0 + 1.0) is None and h.maybe(t0 + 59.9) is None and h.trims == 0
    took = h.maybe(t0 + 60.0)
    assert took is not None and took >= 0.0 and h.trims == 1
    assert h.maybe(h.last + 30.0) is None and h.trims == 1
    assert HeapTrimmer().every_s == HEAP_TRIM_EVERY_S


_STRANDED = """
import ctypes
from argosy.shared.malloc import HeapTrimmer
from argosy.shared.rss import rss_bytes
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt(-1, 1 << 30)            # M_TRIM_THRESHOLD: free() alone keeps the top (as keep_heap does)
libc.mallopt(-3, 1 << 30)            # M_MMAP_THRESHOLD: the chunks come from the heap
blocks = [libc.malloc(64 << 10) for _ in range(2000)]  # 128 MB
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
pin = libc.malloc(64)                # a live chunk above them: no trim from the top can reach them
for b in blocks:
    libc.free(b)
before = rss_bytes()
assert HeapTrimmer(every_s=0.0).maybe() is not None
print(before, rss_bytes())
"""


def test_a_trim_hands_stranded_free_heap_back():
    """Freed chunks below a live one stay resident after free(); the trim hands their pages back
    (run in its own process: the heap settings are process-wide)."""
    out = subprocess.run([sys.executable, "-c", _STRANDED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split())
    assert before - after > 64 << 20, (before, after)
