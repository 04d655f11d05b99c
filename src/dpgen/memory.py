"""The C allocator's settings for the large tensors a training step allocates and frees again."""
from __future__ import annotations

import ctypes
import logging
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
