"""Files that are, at every instant, either their previous content or the complete new one.

Written to a temporary file in the same folder, flushed to disk, then renamed over the target: a kill, a crash
or a full disk during the write leaves the previous file whole and no temporary file behind. A JSON-lines record
only grows (`append_json_line`). And the pages of a memory-mapped file can be given back once read
(`release_file_pages`).
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
from pathlib import Path
from typing import BinaryIO, Callable


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """`write(f)` into a temporary file beside `path`, then rename it over `path`. Temporary files of `path`
    left by a killed process (which cannot remove them) are removed first: one writer per file is assumed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if stale.name[len(path.name) + 2:-4].isdigit():  # `.<name>.<pid>.tmp`, not another file's (`<name>.rank1`)
            stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def read_json_lines(path: str | os.PathLike) -> list[dict]:
    """The records of a JSON-lines file, in order; [] when there is none."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_json_line(path: str | os.PathLike, record: dict) -> None:
    """Append `record` to the JSON-lines file `path`. Appends by different processes are serialised by an exclusive
    lock on `<path>.lock`, and the file is replaced atomically (`atomic_write`) with its previous lines unchanged:
    it is always a whole earlier version, never a torn line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = path.read_bytes() if path.is_file() else b""
        atomic_write(path, lambda f: f.write(previous + (json.dumps(record, default=float) + "\n").encode()))


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MADV_DONTNEED = 4  # <sys/mman.h> on Linux


def file_mapping(address: int) -> tuple[int, int, str] | None:
    """(start, end, path) of the private file mapping holding `address` in this process (/proc/self/maps), or
    None: anonymous memory, a shared mapping, or not Linux."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                start, end = (int(a, 16) for a in fields[0].split("-"))
                if start <= address < end:
                    path = fields[5].strip() if len(fields) == 6 else ""
                    private = fields[1].endswith("p")
                    return (start, end, path) if private and path.startswith("/") else None
    except OSError:
        return None
    return None


def release_file_pages(address: int, nbytes: int) -> bool:
    """Unmap the whole pages of [address, address + nbytes) if they lie in one private file mapping (a
    checkpoint loaded with `torch.load(mmap=True)`): they leave this process's resident memory and a later read
    maps them again from the file. Anonymous memory is never touched (MADV_DONTNEED would zero it). Returns
    whether pages were released."""
    mapping = file_mapping(address) if nbytes > 0 else None
    if mapping is None or address + nbytes > mapping[1]:
        return False
    page = mmap.PAGESIZE
    first, last = -(-address // page) * page, (address + nbytes) // page * page
    if last <= first:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED) == 0
