"""Process memory: the resident-set high-water mark, glibc's malloc arenas capped, and freed
heap memory handed back to the system.

XLA's CPU runtime allocates and frees large buffers from many threads; glibc gives every
thread that contends for the heap an arena of its own (up to 8 x cores), and freed memory in
an arena stays resident. `limit_malloc_arenas` caps their number (``mallopt(M_ARENA_MAX, n)``,
what ``MALLOC_ARENA_MAX=n`` does at process start) for the arenas created afterwards, so call
it before JAX starts its thread pools (before the first computation). `release_free_memory`
(``malloc_trim(0)``) returns the free pages of every arena to the system: called between
phases (after sampling, before a train step) so that one phase's freed buffers do not stay
resident under the next phase's peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys

M_ARENA_MAX = -8  # glibc malloc.h


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, MiB (``getrusage(RUSAGE_SELF).ru_maxrss``:
    KiB on Linux, bytes on macOS)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 2**20 if sys.platform == "darwin" else kb / 1024


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def release_free_memory() -> bool:
    """``malloc_trim(0)``: free heap pages back to the system (module docstring). True when
    glibc released memory; False when it released none or there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):
        return False


def limit_malloc_arenas(n: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``n`` (module docstring); the environment variable
    ``MALLOC_ARENA_MAX`` wins when set. False where there is no glibc (nothing done)."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        return bool(_libc().mallopt(M_ARENA_MAX, int(n)))
    except (OSError, AttributeError):
        return False
