"""Memory freed by a step goes back to the system between steps (memory.give_back_free_heap, FreeHeap)."""
import sys
from types import SimpleNamespace

import pytest

from dpgen.callbacks.free_heap import FreeHeap
from dpgen.memory import give_back_free_heap, reuse_freed_memory, rss_gb

SCRIPT = """
import ctypes, json
from dpgen.memory import give_back_free_heap, reuse_freed_memory, rss_gb
reuse_freed_memory()  # as train.py: freed blocks up to 32 MiB stay in the heap
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
blocks = [libc.malloc(16 * 2**20) for _ in range(32)]  # 512 MiB in heap blocks below the mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 16 * 2**20)
full = rss_gb()
for b in blocks:
    libc.free(ctypes.c_void_p(b))
kept = rss_gb()
give_back_free_heap()
print(json.dumps({"full": full, "kept": kept, "trimmed": rss_gb()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc")
def test_freed_heap_memory_stays_resident_until_given_back():
    import json
    import subprocess
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["kept"] > m["full"] - 0.05  # freed but kept for reuse: still resident
    assert m["trimmed"] < m["kept"] - 0.45  # 0.54 GB given back


def test_free_heap_is_throttled(monkeypatch):
    calls, clock = [], iter([0.0, 1.0, 6.0, 12.0, 13.0, 30.0, 31.0])
    monkeypatch.setattr("dpgen.callbacks.free_heap.time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr("dpgen.callbacks.free_heap.give_back_free_heap", lambda: calls.append(1))
    cb = FreeHeap(every_seconds=10)  # t = 0
    cb.on_train_start(None, None)  # always (after a resumed run's restore), then t = 1
    assert len(calls) == 1
    for _ in range(3):
        cb.on_train_batch_end(None, None, None, None, 0)  # t = 6 (no), 12 (yes, then t = 13), 30 (yes)
    assert len(calls) == 3
    with pytest.raises(ValueError, match="every_seconds"):
        FreeHeap(every_seconds=-1)


def test_memory_readings_are_plausible():
    assert give_back_free_heap() in (True, False) and reuse_freed_memory() in (True, False)
    rss = rss_gb()
    assert rss is None or 0.01 < rss < 1000
