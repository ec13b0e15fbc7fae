"""Large buffers are reused from the heap (extproxy/heap.py), counted in page faults.

A megabyte body that glibc maps afresh for every call is faulted in page by page each time;
kept on the heap, its pages are already there. Counted from /proc/<pid>/stat (minor faults),
never timed: in a fresh interpreter that does what a call does to its buffers, and in the real
serving process moving 3 MB requests and replies.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.processes import Installation
from tests.test_reply_bound import peak_and_current_rss

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(300)

# What one full-object call does to its buffers: twelve 256 KiB reads, their join, a copy.
CALLS = """
import os, sys
from extproxy.heap import keep_large_buffers

def minor_faults():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])

applied = keep_large_buffers(int(sys.argv[1]))
chunk = os.urandom(256 << 10)
before = minor_faults()
for _ in range(30):
    reads = [bytes(bytearray(chunk)) for _ in range(12)]
    body = b"".join(reads)
    reply = b"x" + body
    del reads, body, reply
print(applied, (minor_faults() - before) / 30)
"""


def faults_per_call(threshold: int) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", CALLS, str(threshold)], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0] == "True", float(out[1])


def test_large_buffers_are_not_faulted_in_again_for_every_call():
    applied, kept = faults_per_call(32 << 20)
    left_alone, default = faults_per_call(0)
    assert applied and not left_alone
    # 3 MB mapped afresh is ~750 pages per buffer; reused, a few pages of Python objects.
    assert default > 1000, default
    assert kept < default / 10, (kept, default)


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def big_names_body() -> bytes:
    return json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "Nodes": None,
                       "NodeNames": [f"node-{i:06d}" for i in range(250_000)]}).encode()  # ~3.2 MB


def serving_faults_per_call(tmp_path: Path, url: str, body: bytes, **env: str) -> float:
    config = (f"backends:\n- name: gpu\n  urlPrefix: {url}/scheduler\n  filterVerb: filter\n"
              "  nodeCacheCapable: true\nrecording:\n  enabled: false\n")
    installation = Installation(tmp_path, config, **env)
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        pid = installation.start_serving().process.pid
        session = requests.Session()

        def call() -> None:
            answer = session.post(f"{installation.url}/extender/gpu/filter", data=body, timeout=60)
            assert answer.status_code == 200 and len(answer.content) > 3_000_000

        for _ in range(3):  # warm: the first calls grow the heap
            call()
        before = minor_faults(pid)
        for _ in range(10):
            call()
        return (minor_faults(pid) - before) / 10
    finally:
        installation.close()


def test_the_serving_process_moves_megabyte_bodies_without_faulting_them_in(tmp_path, backend_server):
    from tests.conftest import pass_all

    backend = backend_server({"filter": pass_all})
    body = big_names_body()
    kept = serving_faults_per_call(tmp_path / "kept", backend.url, body)
    # The baseline with every large buffer mapped afresh. EXTPROXY_HEAP_KEEP_BYTES=0 alone leaves
    # glibc's own threshold, which rises after a large free and may then keep the buffers too
    # (0.7 pages a call once in CI); a threshold set through the tunable stays where it is set.
    mapped = serving_faults_per_call(tmp_path / "mapped", backend.url, body, EXTPROXY_HEAP_KEEP_BYTES="0",
                                     GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")
    # A 3.2 MB buffer mapped afresh is ~780 pages. With recording off nothing is joined for a
    # record, so what is left is the parts in and out: 5,300-6,200 pages a call measured with
    # every buffer above 128 KiB mapped, against 0.1-98 when they are kept.
    assert mapped > 500, (mapped, kept)
    assert kept < mapped / 4, (kept, mapped)


FROZEN = """
import gc
import extproxy.asgi
made_at_start = len(gc.get_objects()) + gc.get_freeze_count()
gc.collect()
print(gc.get_freeze_count(), made_at_start, len(gc.get_objects()))
"""


def fresh_env(tmp_path) -> dict[str, str]:
    """A fresh interpreter's environment: the settings, a data directory of its own, quiet logs."""
    return {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "extproxy.settings", "EXTPROXY_DATA_DIR": str(tmp_path),
            "EXTPROXY_LOG_LEVEL": "WARNING"}


def test_what_start_up_built_is_out_of_the_collectors_reach(tmp_path):
    """A full collection in the serving process walks only what was made after start-up: the
    ~115,000 objects of Django, its views and the engine are frozen once, when the application is imported."""
    env = fresh_env(tmp_path)
    out = subprocess.run([sys.executable, "-c", FROZEN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    frozen, made_at_start, tracked_after = (int(v) for v in out.stdout.split())
    assert frozen > 20_000 and frozen > 0.9 * made_at_start
    assert tracked_after < made_at_start / 10  # what a full collection still walks


FIRST_REQUEST = """
import asyncio, gc, urllib.request
import uvicorn, uvloop

server = uvicorn.Server(uvicorn.Config("extproxy.asgi:application", host="127.0.0.1", port=0, lifespan="on",
                                       loop="none", http="httptools", log_level="warning"))

async def main():
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    before = len(gc.get_objects())
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
    print(before, len(gc.get_objects()), body == b"ok\\n")
    server.should_exit = True
    await task

uvloop.run(main())
"""


def test_the_first_request_builds_little_that_a_full_collection_must_walk(tmp_path):
    """The first request to the serving process (kubelet's /healthz probe) must not import the view
    modules after start-up's freeze: ~25,000 objects that every full collection, in the middle of
    some scheduler call, would walk again. The URL configuration is imported before the freeze."""
    env = {**fresh_env(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", FIRST_REQUEST], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    before, after, answered = out.stdout.split()
    assert answered == "True"
    assert int(after) - int(before) < 2_000, (before, after)  # measured ~110; ~25,000 with the views imported late


# A peak in a fresh interpreter: 80 MB of 2 KB buffers (above pymalloc's 512 bytes: glibc's
# heap), every 20th kept, so that what is freed lies below something still in use.
PEAK = """
import sys
from extproxy.heap import HeapTrimmer, resident_bytes

trimmer = HeapTrimmer(every=0)
MiB = 1 << 20
print(trimmer.check(), resident_bytes() // MiB)  # the first look: nothing has grown
blocks = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]
pinned = blocks[::20]
del blocks
peak = resident_bytes() // MiB
looked = trimmer.check() if sys.argv[1] == "look" else False
print(looked, peak, resident_bytes() // MiB, trimmer.trims)
"""


def peak_in_a_fresh_interpreter(look: bool) -> tuple[bool, bool, int, int, int]:
    out = subprocess.run([sys.executable, "-c", PEAK, "look" if look else "no"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    first, looked = out[0] == "True", out[2] == "True"
    return first, looked, int(out[3]), int(out[4]), int(out[5])


def test_a_peak_left_below_what_is_in_use_is_handed_back_at_the_next_look():
    first, looked, peak, after, trims = peak_in_a_fresh_interpreter(look=True)
    assert not first  # nothing had grown at the first look
    assert looked and trims == 1
    assert peak - after > 50, (peak, after)  # ~76 MB of the 80 were freed below the kept 4 MB
    # Without the look, glibc keeps it all: it lies below blocks still in use.
    _, _, peak, after, _ = peak_in_a_fresh_interpreter(look=False)
    assert peak - after < 5, (peak, after)


# A trim while the peak still runs: some of it freed below blocks in use and trimmed, then the rest
# freed. The process's low before the peak, not the one the mid-peak trim left, is what it must
# come back to (the serving process under load: a trim between two of eight concurrent calls).
TRIMMED_MID_PEAK = """
from extproxy.heap import HeapTrimmer, resident_bytes

trimmer = HeapTrimmer(every=0)
MiB = 1 << 20
trimmer.check()
held = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]  # the peak's calls still running
done = [bytes(2000) + bytes([i % 256]) for i in range(20_000)]
pinned = done[::20]
del done  # the first calls ended, below the last one's blocks
mid = trimmer.check()
middle = resident_bytes() // MiB
del held  # the last calls end
after = trimmer.check()
print(mid, after, middle, resident_bytes() // MiB)
"""


def test_a_trim_in_the_middle_of_a_peak_does_not_make_the_peak_the_new_low():
    mid, after, middle, end = subprocess.run([sys.executable, "-c", TRIMMED_MID_PEAK], cwd=ROOT, capture_output=True,
                                             text=True, check=True).stdout.split()
    assert mid == "True"  # ~38 MB freed below the held blocks: trimmed while they were in use
    assert after == "True", (middle, end)
    assert int(middle) - int(end) > 50, (middle, end)  # ~78 MB of held blocks handed back


# Steady full-object traffic: each call takes 3 x 6 MB buffers and frees them; with
# keep_large_buffers they are kept on the heap between calls. After a trim the next call faults
# them in again and the process is back at its size: each such undone trim doubles the looks let
# pass before the next.
STEADY = """
from extproxy.heap import HeapTrimmer, keep_large_buffers

def minor_faults():
    return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])

def call():
    buffers = [bytearray(6 << 20) for _ in range(3)]
    for b in buffers:
        b[::4096] = b"x" * len(b[::4096])  # every page touched, as a body read into it is
    del buffers

keep_large_buffers(32 << 20)
trimmer = HeapTrimmer(every=0)
trimmer.check()
looks = []
for _ in range(40):
    call()
    looks.append(trimmer.check())
before = minor_faults()
for _ in range(10):
    call()
print("".join("T" if look else "." for look in looks), (minor_faults() - before) / 10)
"""


def test_steady_use_of_kept_buffers_is_trimmed_ever_more_rarely():
    looks, faults = subprocess.run([sys.executable, "-c", STEADY], cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout.split()
    # The first call grows the process by its 18 MB, kept free between calls: trimmed. The next
    # call faults them in again; each trim so undone doubles the looks let pass: 1, 2, 4, 8, 16.
    assert looks == "T.T..T....T........T................T...", looks
    assert float(faults) < 500, faults  # kept between trims: faulted in afresh, ~4,600 pages a call


def test_the_trimmer_looks_by_itself_when_started_and_not_when_off():
    script = """
import time
from extproxy.heap import HeapTrimmer, resident_bytes
off = HeapTrimmer(every=0)
on = HeapTrimmer(every=0.05)
print(off.start(), on.start())
blocks = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]
pinned = blocks[::20]
del blocks
peak = resident_bytes()
deadline = time.monotonic() + 10
while on.trims == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
on.stop()
print(on.trims, off.trims, (peak - resident_bytes()) >> 20)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["False", "True"]
    on_trims, given_back = int(out[2]), int(out[4])  # the one off never started: nothing to count
    assert on_trims >= 1
    assert given_back > 50, given_back


def serving_after_a_peak(tmp_path: Path, url: str, body: bytes, trim_seconds: str,
                         wait: float) -> tuple[float, float, float]:
    """The serving process's resident MiB before 8 concurrent 3 MB calls, at their highest (the
    trimmer may look while they run), and after them: once back within a third of the peak's
    growth, or `wait` seconds later."""
    from concurrent.futures import ThreadPoolExecutor

    config = (f"backends:\n- name: gpu\n  urlPrefix: {url}/scheduler\n  filterVerb: filter\n"
              "  nodeCacheCapable: true\nrecording:\n  enabled: false\n")
    installation = Installation(tmp_path, config, EXTPROXY_HEAP_TRIM_SECONDS=trim_seconds)
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        pid = installation.start_serving().process.pid

        def call(_: int) -> None:
            answer = requests.post(f"{installation.url}/extender/gpu/filter", data=body, timeout=60)
            assert answer.status_code == 200 and len(answer.content) > 3_000_000

        call(0)  # warm: the first call's buffers are the working set
        time.sleep(1)
        before = peak_and_current_rss(pid)[1] / 2**20
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from now on
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(call, range(16)))
        peak, now = (b / 2**20 for b in peak_and_current_rss(pid))
        deadline = time.monotonic() + wait
        while now - before >= (peak - before) / 3 and time.monotonic() < deadline:
            time.sleep(0.1)
            now = peak_and_current_rss(pid)[1] / 2**20
        return before, peak, now
    finally:
        installation.close()


PEAK_MIB = 8  # the least growth of the serving process above its working set that the test reads


def test_the_serving_process_hands_back_what_a_peak_of_large_calls_left(tmp_path, backend_server):
    """Eight 3 MB calls at once take the serving process 14-45 MiB above its working set; the
    trimmer started with the server gives that back within a few looks (a trim undone while the
    calls still ran makes it wait a few more). Off, it stays.

    The peak is only required to be 8 MiB, enough to tell given back from kept: a CI run saw
    14.5 MiB with the trimmer off, and a larger bound failed that run for the peak, not the
    trimmer."""
    from tests.conftest import pass_all

    backend = backend_server({"filter": pass_all})
    body = big_names_body()
    before, peak, after = serving_after_a_peak(tmp_path / "on", backend.url, body, "0.2", wait=15)
    assert peak - before > PEAK_MIB, (before, peak)
    assert after - before < (peak - before) / 3, (before, peak, after)
    before, peak, after = serving_after_a_peak(tmp_path / "off", backend.url, body, "0", wait=3)
    assert peak - before > PEAK_MIB and after - before > (peak - before) / 2, (before, peak, after)
