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
from pathlib import Path

import pytest
import requests

from tests.processes import Installation

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


def test_what_start_up_built_is_out_of_the_collectors_reach(tmp_path):
    """A full collection in the serving process walks only what was made after start-up: the
    ~90,000 objects of Django and the engine are frozen once, when the application is imported."""
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "extproxy.settings", "EXTPROXY_DATA_DIR": str(tmp_path),
           "EXTPROXY_LOG_LEVEL": "WARNING"}
    out = subprocess.run([sys.executable, "-c", FROZEN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    frozen, made_at_start, tracked_after = (int(v) for v in out.stdout.split())
    assert frozen > 20_000 and frozen > 0.9 * made_at_start
    assert tracked_after < made_at_start / 10  # what a full collection still walks
