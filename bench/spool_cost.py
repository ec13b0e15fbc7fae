"""What the serving process's spool-writer thread costs per call: the measurements behind
recording/spool.py's gathered write and its CRC library.

For a names N=1000 and a full-object N=1000 filter call (request and reply of the bench's
bodies, as bench/run.py builds them): the CPU time to encode the call's Trace and append it to a
spool (best of ROUNDS), and the CRC-32 of the record alone with zlib and with ISA-L. On a core
shared with the serving loop, all of it is time a call in flight can wait for.

    .venv/bin/python bench/spool_cost.py          # pinned to the bench's proxy core
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from run import PIN, PROXY_CORE, build_bodies  # noqa: E402

from extproxy.recording.spool import SpoolSettings  # noqa: E402
from extproxy.recording.spool_writer import SpoolWriter  # noqa: E402
from extproxy.recording.trace import Trace, encode_trace  # noqa: E402

ROUNDS = 30


def best(fn) -> float:
    out = float("inf")
    for _ in range(ROUNDS):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return out


def main() -> int:
    if PIN:
        os.sched_setaffinity(0, {PROXY_CORE})
    try:
        from isal.isal_zlib import crc32 as isal_crc32
    except ImportError:
        isal_crc32 = None
    bodies = build_bodies([1000])
    root = Path(tempfile.mkdtemp(prefix="extproxy-spool-cost-"))
    writer = SpoolWriter(SpoolSettings(root=root, max_bytes=1 << 40, segment_bytes=1 << 40, fsync="never"))
    print(f"spool writer cost per call; load average {os.getloadavg()[0]:.2f}; best of {ROUNDS}, CPU time")
    try:
        for mode in ("names", "full"):
            body = bodies[(mode, 1000)]
            trace = Trace("filter", "ref", "http://ref", 1.0, 2.0, body, 200, body, 200)
            record = encode_trace(trace)
            append = best(lambda: writer.append([encode_trace(trace)]))
            line = (f"  {mode:5s} N=1000: record {len(record) / 1e6:6.2f} MB | encode + append {append * 1e3:7.3f} ms"
                    f" | CRC-32 zlib {best(lambda: zlib.crc32(record)) * 1e3:6.3f} ms")
            if isal_crc32 is not None:
                line += f", ISA-L {best(lambda: isal_crc32(record)) * 1e3:6.3f} ms"
            print(line)
    finally:
        writer.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
