"""Large buffers reused from the heap instead of mapped and unmapped on every call.

glibc serves an allocation above its mmap threshold (128 KiB at start) with a fresh mmap and
returns it with munmap when it is freed, so the next one page-faults and zeroes every 4 KiB page
again. A full-object call moves ~3 MB bodies through 64-256 KiB reads and their joins, four times
(request in and out, reply in and out): the serving process spent about 8.7 ms of kernel time per
full N=1000 call doing that, against 2.9 ms with large buffers kept on the heap (bench/README.md).
glibc raises the threshold by itself after such a free, but only up to the size just freed and
with a trim threshold that hands the top of the heap back again at the next free.

`keep_large_buffers(n)` fixes both: allocations up to `n` bytes come from the heap, and up to
`2 n` freed bytes at the heap's top are kept for the next call instead of returned. That is the
memory it costs at most, beyond what the process holds anyway. Larger buffers are still mapped
(glibc refuses a threshold above 32 MiB). Elsewhere than glibc (musl) it does nothing and says so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
GLIBC_MAX_MMAP_THRESHOLD = 32 << 20  # HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses more


def keep_large_buffers(threshold: int) -> bool:
    """Serve allocations up to `threshold` bytes from the heap; False when not applied (0 or not glibc)."""
    if threshold <= 0:
        return False
    threshold = min(threshold, GLIBC_MAX_MMAP_THRESHOLD)
    mallopt = _mallopt()
    if mallopt is None:
        log.info("large buffers: mallopt not available (not glibc); allocator left as it is")
        return False
    # The trim threshold first: with only the mmap threshold fixed, glibc would still hand a
    # freed buffer at the heap's top back to the kernel (trim threshold 128 KiB).
    return bool(mallopt(M_TRIM_THRESHOLD, 2 * threshold)) and bool(mallopt(M_MMAP_THRESHOLD, threshold))


def _mallopt():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallopt
    except (OSError, AttributeError):
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # musl has a mallopt that does nothing
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function
