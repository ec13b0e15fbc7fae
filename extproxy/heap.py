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

`HeapTrimmer` gives back what a passing peak leaves. glibc hands memory back to the kernel only
from the top of the heap, and only beyond its trim threshold (above: up to 2 n); what is freed
below something still in use stays resident too. A peak (the hand-off filling while the
spool-writer thread does not get to run: 1,949 calls, 11.7 MiB of bodies, in a closed-loop run)
thus left the serving process larger for good, and each higher peak added more (bench/README.md,
"Tenth pass"). Every `every` seconds the trimmer reads the process's resident size; when it has
grown by more than `slack` since the lowest it saw, and the heap holds more than `slack` free
(glibc's `mallinfo2`), `malloc_trim` hands the free pages back. Steady traffic does not grow the
process, so it is not trimmed; large buffers kept for reuse are given back too, and the next call
that needs them faults them in once (steady full-object traffic brings them back each time, so
such trims come ever more rarely: `check`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
GLIBC_MAX_MMAP_THRESHOLD = 32 << 20  # HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses more
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TRIM_SLACK = 4 << 20  # a process grown by more than this, with as much free in its heap, is trimmed
MAX_BACKOFF = 32  # looks let pass at most after a trim undone (at every 10 s: ~5 minutes)


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


class _MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (malloc.h, glibc 2.33 and later): every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache  # loaded once per process: keep_large_buffers and the trimmer both ask
def _glibc():
    """The C library when it is glibc, else None (musl has a mallopt that does nothing)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None


def _mallopt():
    libc = _glibc()
    function = getattr(libc, "mallopt", None)
    if function is None:
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


def resident_bytes() -> int:
    """This process's resident size (Linux's /proc/self/statm), 0 when it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


class HeapTrimmer:
    """Hands back to the kernel the free heap memory a peak left resident (module docstring).

    One daemon thread; `check` is one look (the thread's round, and what tests call). Each look
    walks glibc's free lists under its lock; a trim also makes one madvise per free chunk.
    """

    def __init__(self, every: float, slack: int = TRIM_SLACK) -> None:
        self.every = every
        self.slack = slack
        self.trims = 0
        self._lowest: int | None = None  # resident bytes growth is measured from
        self._before_trim: int | None = None  # resident bytes before the last look's trim
        self._wait = 0  # looks that find the process grown to let pass before the next trim
        self._backoff = 1  # looks to wait after the next trim undone
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        libc = _glibc()
        self._info: Any = getattr(libc, "mallinfo2", None)  # glibc 2.33 and later
        self._trim: Any = getattr(libc, "malloc_trim", None)
        if self._info is not None and self._trim is not None:
            self._info.restype = _MallInfo2
            self._info.argtypes = ()
            self._trim.argtypes = (ctypes.c_size_t,)
            self._trim.restype = ctypes.c_int
        # glibc 2.33 or later, and a /proc to read the resident size from
        self.available = self._info is not None and self._trim is not None and resident_bytes() > 0

    def free_bytes(self) -> int:
        """Bytes in the heap's free chunks, all arenas, their tops included."""
        return int(self._info().fordblks)

    def check(self) -> bool:
        """Trim when the process grew by more than `slack` since its lowest and that much is free.

        Growth, not free memory alone, decides: chunks trimmed below the top stay free chunks
        (their pages are given back, not their place), so the free bytes read the same after a
        trim, and again after a later peak has faulted those pages back in. A trim undone by the
        next look (the process back at its size before it: large buffers of steady full-object
        traffic, say, faulted in again) doubles the looks let pass before the next one, up to
        MAX_BACKOFF; a trim that holds resets that. Steady traffic is so trimmed ever more rarely,
        and a peak that follows it is still trimmed within a few looks. A working set that has
        grown for good (a fuller node cache) so costs one trim that gives little back every
        MAX_BACKOFF looks: the low is never raised to it.
        """
        if not self.available:
            return False
        resident = resident_bytes()
        before, self._before_trim = self._before_trim, None
        if before is not None:
            if resident >= before - self.slack:
                self._wait, self._backoff = self._backoff, min(2 * self._backoff, MAX_BACKOFF)
            else:
                self._backoff = 1
        if self._lowest is None or resident < self._lowest:
            self._lowest = resident
        if resident - self._lowest <= self.slack or self.free_bytes() <= self.slack:
            return False
        if self._wait > 0:
            self._wait -= 1
            return False
        self._trim(0)
        self.trims += 1
        self._before_trim = resident
        after = resident_bytes()
        # The low is never raised: a trim while a peak still runs leaves the peak's blocks in use
        # resident, and taking that for the new low would leave them resident once they are freed.
        self._lowest = min(self._lowest, after)
        log.debug("heap: trimmed from %d to %d resident bytes", resident, after)
        return True

    def start(self) -> bool:
        """Look every `every` seconds on a daemon thread; False when off (every <= 0, not glibc)."""
        if self.every <= 0 or not self.available or self._thread is not None:
            return False
        self._lowest = resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="extproxy-heap-trimmer", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.check()
            except Exception:  # the allocator's statistics are a convenience, never fatal
                log.exception("heap: trimming failed; no longer trimmed")
                return


def manage_heap(keep_bytes: int, trim_seconds: float) -> HeapTrimmer:
    """keep_large_buffers(keep_bytes), and the HeapTrimmer looking every trim_seconds (to start)."""
    keep_large_buffers(keep_bytes)
    return HeapTrimmer(trim_seconds)
