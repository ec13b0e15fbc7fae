"""One gathered write of spool frames (`pwrite_all`: pwritev at an explicit offset, short
writes resumed), and what part of it reached the file when it fails (`whole_frames`,
`whole_records`, `SpoolWriteError`): records whole in the file are spooled (the recorder reads
and stores them), so they must not also be counted as dropped.

Must not know segments, the bound or the format beyond a frame being a header and a payload.
"""
from __future__ import annotations

import os

from .spool import HEADER


class SpoolWriteError(OSError):
    """An append whose write failed, maybe part way. `accepted` is as `append` returns it: True
    for each record whole in the spool (the recorder stores it), False for the others; `failed`
    counts the records that were to be written and are not whole (spool-error drops), as
    against those refused at the bound (spool-full)."""

    def __init__(self, cause: OSError, accepted: list[bool], failed: int) -> None:
        super().__init__(*((cause.errno, cause.strerror) if cause.errno is not None else (str(cause),)))
        self.accepted, self.failed = accepted, failed


def whole_frames(buffers: list[bytes], written: int) -> int:
    """Bytes of the whole frames (header and payload pairs) among the first `written` bytes."""
    whole = 0
    for head, payload in zip(buffers[0::2], buffers[1::2]):  # a recycled file's end marker, last, is unpaired
        if whole + len(head) + len(payload) > written:
            break
        whole += len(head) + len(payload)
    return whole


def whole_records(payloads: list[bytes], accepted: list[bool], whole: int) -> tuple[list[bool], int]:
    """`accepted` after a write of which `whole` bytes of frames reached the file, and how many
    of the records to be written did not."""
    reached, failed = [], 0
    for payload, ok in zip(payloads, accepted):
        if ok and whole >= HEADER.size + len(payload):
            whole -= HEADER.size + len(payload)
        elif ok:
            ok, failed, whole = False, failed + 1, -1  # frames are in order: none after this one
        reached.append(ok)
    return reached, failed


IOV_MAX = 1024  # buffers per pwritev (Linux's UIO_MAXIOV)


def pwrite_all(fd: int, buffers: list[bytes], offset: int) -> None:
    """Write every buffer, in order, from `offset`, with as few pwritev calls as the kernel allows.

    At an explicit offset rather than appending: a recycled segment is overwritten from its start.
    An OSError carries `written`: the bytes of this write that reached the file before it."""
    start, i = offset, 0
    try:
        while i < len(buffers):
            group = buffers[i : i + IOV_MAX]
            written = os.pwritev(fd, group, offset)
            offset += written
            for buf in group:  # a short write (a full disk, a signal): go on where it stopped
                if written >= len(buf):
                    written -= len(buf)
                    i += 1
                    continue
                rest = memoryview(buf)[written:]
                while rest:
                    n = os.pwrite(fd, rest, offset)
                    offset += n
                    rest = rest[n:]
                i += 1
                break
    except OSError as exc:
        exc.written = offset - start  # type: ignore[attr-defined]
        raise
