"""The process's memory: the C allocator's settings for the large tensors a training step allocates and frees
again, giving its free heap back, and the resident size now and at its peak."""
from __future__ import annotations

import ctypes
import logging
import resource
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters of glibc's malloc.h
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's largest allowed mmap threshold on 64-bit systems
NEVER_TRIM = 2**31 - 1  # mallopt takes a C int: keep up to 2 GiB of free heap top


def reuse_freed_memory() -> bool:
    """Keep memory freed by one step for the next instead of giving it back to the system.

    glibc's malloc serves a block above its mmap threshold (128 KiB, then adjusted up to 32 MiB) with a fresh
    mapping and unmaps it on free, and returns the free top of the heap above 128 KiB: every step's tensors are
    then faulted in page by page again (a 4000-teacher G-PATE run took 250 million minor page faults). With the
    threshold at its 32 MiB maximum and no trimming, blocks up to 32 MiB are reused from the heap; the resident
    size becomes the step's peak working memory, which it reaches every step anyway. Returns False where the
    C library is not glibc (nothing changes there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.debug("mallopt unavailable: the allocator keeps its defaults")
    return ok


def give_back_free_heap() -> bool:
    """Return the free pages of every malloc arena to the system (glibc's `malloc_trim(0)`): what a step
    freed, and what a checkpoint or a sample grid allocated once, stop counting as resident until a later step
    needs them again (`reuse_freed_memory` keeps them otherwise). Returns False where that is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def rss_gb() -> float | None:
    """Resident memory of this process now, in GB (VmRSS of /proc/self/status); None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 / 1e9 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1e9 if sys.platform == "darwin" else 1e9 / 1024)
