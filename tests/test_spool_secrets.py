"""A Pod's secrets in the spool, end to end with the real serving and recorder processes.

The spool holds each call as the scheduler sent it, before redaction; the database keeps the
redacted copy. Once a call is stored, its bytes as received must leave the spool: the recorder
zeroes a finished segment kept for reuse once EXTPROXY_SPOOL_SEGMENT_SECONDS passed without a
writer taking it, and the serving process finishes a segment whose first record is that old, so
that a trickle of calls does not keep one open (and unretired) for hours. With 0 segments end
by size only, and the secret stays: the case that shows the test can tell. A clean stop of the
serving process ends its last segment either way.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes
from tests.processes import Installation, stored_calls, terminate
from tests.test_recording_processes import install  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(300)

SECRET = "hunter2-only-in-the-spool-7f3a"


def body_with_secret() -> bytes:
    args = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    args["Pod"]["spec"]["containers"][0]["env"].append({"name": "DB_PASSWORD", "value": SECRET})
    return json.dumps(args).encode()


def spool_files_holding(inst: Installation, text: str) -> list[str]:
    """The spool's files whose bytes hold `text` (records are spooled plain: see the install)."""
    needle = text.encode()
    return [str(p.relative_to(inst.spool)) for p in sorted(Path(inst.spool).rglob("*"))
            if p.is_file() and needle in p.read_bytes()]


def post_calls(inst: Installation, n: int) -> None:
    body = body_with_secret()
    for _ in range(n):
        assert requests.post(f"{inst.url}/extender/gpu/filter", data=body, timeout=30).status_code == 200


@pytest.mark.parametrize("segment_seconds, left", [("1", False), ("0", True)])
def test_a_stored_calls_secret_leaves_the_spool_within_the_segment_age(install, segment_seconds, left):  # noqa: F811
    # Plain records, so that a byte search of the files finds every copy (a deflated one would hide it).
    inst = install(EXTPROXY_SPOOL_SEGMENT_SECONDS=segment_seconds, EXTPROXY_SPOOL_COMPRESS="0")
    inst.start_serving()
    post_calls(inst, 3)
    inst.wait_spooled()
    assert spool_files_holding(inst, SECRET)  # as received: the recorder has not stored them yet

    inst.start_recorder()
    inst.wait_drained()
    assert stored_calls(inst) == (3, 3)
    # Stored: the segment is finished once its first record is a second old, retired by the
    # recorder's next read and zeroed a second later. Waited for up to 20 s; with 0 it must
    # still be there after 3 s.
    deadline = time.monotonic() + (3 if left else 20)
    while spool_files_holding(inst, SECRET) and time.monotonic() < deadline:
        time.sleep(0.2)
    holding = spool_files_holding(inst, SECRET)
    assert bool(holding) == left, holding

    post_calls(inst, 2)  # into the recycled (zeroed) file, or the open segment: recorded as any other
    inst.wait_drained()
    assert stored_calls(inst) == (5, 5)

    # A clean stop starts an empty segment after the last one, so that the recorder retires
    # that one too, whatever the age: nothing waits for this serving process to come back.
    assert terminate(inst.serving, 30) is not None  # stopped (uvicorn ends on the signal itself, after its shutdown)
    deadline = time.monotonic() + 20
    while (holding := spool_files_holding(inst, SECRET)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert holding == []
