"""What zeroing the spool's free files costs, and whether reusing a zeroed file still saves the
serving side what recycling was for (README, "The spool").

Times, in this process's thread (CPU: user + kernel, and wall), over --rounds rounds:
- zeroing an --mb MiB segment in place (recording/zeroing.py's zero_file), with and without
  fdatasync: the recorder's cost per retired segment;
- writing --mb MiB (in 256 KiB writes, as the spool-writer's gathered writes come) into a new
  file, into a file that still holds its old data (recycled, as before zeroing), and into a
  zeroed one: the serving side's cost per segment.

Run: .venv/bin/python bench/spool_zeroing.py [--mb 8] [--rounds 15] [--dir DIR]
DIR must be on the spool's file system (default: a temporary directory under ./var).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from extproxy.recording.zeroing import zero_file  # noqa: E402

CHUNK = 256 << 10


def timed(action) -> tuple[float, float]:
    """(thread CPU ms, wall ms) of action()."""
    cpu, wall = time.thread_time(), time.perf_counter()
    action()
    return (time.thread_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def write_through(path: Path, data: bytes, create: bool) -> None:
    fd = os.open(path, os.O_WRONLY | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
    try:
        view = memoryview(data)
        for offset in range(0, len(data), CHUNK):
            os.pwrite(fd, view[offset:offset + CHUNK], offset)
    finally:
        os.close(fd)


def old_file(path: Path, data: bytes) -> None:
    """A finished segment: written, on disk, its pages still cached."""
    write_through(path, data, create=True)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or ROOT / "var"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spool-zeroing-", dir=base))
    data = os.urandom(args.mb << 20)
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        for n in range(args.rounds):
            for sync in (False, True):
                path = work / f"z{n}{sync}"
                old_file(path, data)
                results.setdefault(f"zero {args.mb} MiB, fdatasync={'on' if sync else 'off'}", []).append(
                    timed(lambda: zero_file(path, sync)))
                path.unlink()
            fresh = work / f"fresh{n}"
            results.setdefault("write into a new file", []).append(timed(lambda: write_through(fresh, data, True)))
            kept = work / f"kept{n}"
            old_file(kept, data)
            results.setdefault("write into a recycled file (old data)", []).append(
                timed(lambda: write_through(kept, data, False)))
            zeroed = work / f"zeroed{n}"
            old_file(zeroed, data)
            zero_file(zeroed, True)
            results.setdefault("write into a recycled file (zeroed)", []).append(
                timed(lambda: write_through(zeroed, data, False)))
            for p in (fresh, kept, zeroed):
                p.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.mb} MiB, {args.rounds} rounds, in {base}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'':42} {'CPU ms p50':>10} {'(min-max)':>15} {'wall ms p50':>12}")
    for name, samples in results.items():
        cpu = sorted(s[0] for s in samples)
        wall = statistics.median(s[1] for s in samples)
        print(f"{name:42} {statistics.median(cpu):10.2f} {f'({cpu[0]:.2f}-{cpu[-1]:.2f})':>15} {wall:12.2f}")


if __name__ == "__main__":
    main()
