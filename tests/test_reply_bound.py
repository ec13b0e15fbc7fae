"""Bounded work per call: a backend reply over EXTPROXY_MAX_REPLY_BYTES.

Per-backend form: the scheduler still gets every byte (streamed through), the record keeps the
first part with a `reply-truncated` finding. Combined form: combining needs a whole reply, so
one over the bound is that backend's failed call, with the reason. The last test runs extproxy
as its own process and reads its peak RSS around a 200 MB reply.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import requests

from tests.conftest import BackendHandler, fixture_bytes, free_port, pass_all, reply

FILTER_NAMES = "filter-request.nodecache-true.json"
ROOT = Path(__file__).resolve().parent.parent


def names_reply_chunks(total_names: int, per_chunk: int = 20_000):
    """A names-mode ExtenderFilterResult, as byte chunks (never whole in memory)."""
    yield b'{"NodeNames":['
    for start in range(0, total_names, per_chunk):
        stop = min(total_names, start + per_chunk)
        names = ",".join(f'"node-{i:09d}"' for i in range(start, stop))
        yield (("," if start else "") + names).encode()
    yield b'],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def streamed(total_names: int, chunked: bool = False):
    """A backend behaviour that writes the big reply in pieces (with Content-Length, or chunked)."""
    length = sum(len(c) for c in names_reply_chunks(total_names))

    def behave(handler: BackendHandler, _body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        else:
            handler.send_header("Content-Length", str(length))
        handler.end_headers()
        try:
            for chunk in names_reply_chunks(total_names):
                if chunked:
                    handler.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                else:
                    handler.wfile.write(chunk)
            if chunked:
                handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    return behave, length


def digest_of(chunks) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        n += len(chunk)
    return h.hexdigest(), n


def config_for(url: str, **fields) -> dict:
    backend = {"name": "big", "urlPrefix": f"{url}/scheduler", "filterVerb": "filter", "weight": 1,
               "httpTimeout": "20s", "nodeCacheCapable": True}
    backend.update(fields)
    return {"backends": [backend]}


def stored_call(server):
    from extproxy.models import Call

    server.flush()
    return Call.objects.get()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_it_streams_a_reply_over_the_bound_through_and_records_its_first_part(
    backend_server, proxy, write_config, settings, chunked
):
    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    behave, length = streamed(200_000, chunked=chunked)  # about 3 MB
    backend = backend_server({"filter": behave})
    server = proxy(write_config(config_for(backend.url)))

    with requests.post(server.url + "/extender/big/filter", data=fixture_bytes(FILTER_NAMES), stream=True, timeout=60) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json"
        got = digest_of(resp.iter_content(65536))

    assert got == digest_of(names_reply_chunks(200_000))  # every byte, unchanged
    assert got[1] == length
    call = stored_call(server)
    truncated = [f for f in call.findings if f["kind"] == "reply-truncated"]
    assert len(truncated) == 1 and f"reply of {length} bytes" in truncated[0]["detail"]
    assert "the first 262144 bytes are kept" in truncated[0]["detail"]
    kept = zlib.decompress(call.response_body)[1:]  # the stored form's one-byte mark, then the bytes
    assert kept == b"".join(names_reply_chunks(200_000))[:262144]
    assert call.http_status == 200 and call.outcome == "error"
    assert "too large to judge" in call.error
    assert call.node_count == 5  # the request is recorded whole, as always


def test_it_answers_a_reply_within_the_bound_whole_and_records_it_whole(backend_server, proxy, write_config, settings):
    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    answer = fixture_bytes("filter-result.nodecache-true.json")
    backend = backend_server({"filter": reply(200, answer)})
    server = proxy(write_config(config_for(backend.url)))

    resp = requests.post(server.url + "/extender/big/filter", data=fixture_bytes(FILTER_NAMES), timeout=30)

    assert resp.status_code == 200 and resp.content == answer
    assert resp.headers["content-length"] == str(len(answer))
    call = stored_call(server)
    assert call.outcome == "ok" and not [f for f in call.findings if f["kind"] == "reply-truncated"]


def combined_config(big_url: str, small_url: str, ignorable: bool) -> dict:
    return {
        "backends": [
            {"name": "big", "urlPrefix": f"{big_url}/scheduler", "filterVerb": "filter", "weight": 1,
             "httpTimeout": "20s", "nodeCacheCapable": True, "ignorable": ignorable},
            {"name": "small", "urlPrefix": f"{small_url}/scheduler", "filterVerb": "filter", "weight": 1,
             "httpTimeout": "20s", "nodeCacheCapable": True},
        ]
    }


def test_it_fails_a_backend_whose_reply_is_over_the_bound_in_the_combined_form(
    backend_server, proxy, write_config, settings
):
    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    big = backend_server({"filter": streamed(200_000)[0]})
    small = backend_server({"filter": pass_all})
    server = proxy(write_config(combined_config(big.url, small.url, ignorable=False)))

    resp = requests.post(server.url + "/extender/filter", data=fixture_bytes(FILTER_NAMES), timeout=60)

    assert resp.status_code == 200
    error = resp.json()["Error"]
    assert "reply larger than 262144 bytes (EXTPROXY_MAX_REPLY_BYTES)" in error
    assert small.received == []  # the chain stopped at the failed non-ignorable backend
    call = stored_call(server)
    child = call.backend_calls.get(backend="big")
    assert child.outcome == "error" and "reply larger than 262144 bytes" in child.error
    assert [f["kind"] for f in child.findings] == ["reply-truncated"]
    assert len(zlib.decompress(child.response_body)) == 262144 + 1


def test_it_skips_an_ignorable_backend_whose_reply_is_over_the_bound(backend_server, proxy, write_config, settings):
    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    big = backend_server({"filter": streamed(200_000)[0]})
    small = backend_server({"filter": pass_all})
    server = proxy(write_config(combined_config(big.url, small.url, ignorable=True)))
    request = fixture_bytes(FILTER_NAMES)

    resp = requests.post(server.url + "/extender/filter", data=request, timeout=60)

    assert resp.status_code == 200
    answer = resp.json()
    assert answer["Error"] == "" and answer["NodeNames"] == json.loads(request)["NodeNames"]
    assert len(small.received) == 1


# --- a 200 MB reply, extproxy in its own process -------------------------------------------


def peak_and_current_rss(pid: int) -> tuple[int, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0]) * 1024
    return values["VmHWM"], values["VmRSS"]


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:.0f}s")


def test_it_serves_a_200_mb_reply_with_bounded_memory_and_records_its_first_part(backend_server, tmp_path):
    cap = 16 * 1024 * 1024
    total_names = 12_600_000  # 200 MB of names
    big, length = streamed(total_names)
    assert length > 200_000_000
    backend = backend_server({"filter": big, "small": reply(200, fixture_bytes("filter-result.nodecache-true.json"))})
    config = tmp_path / "extproxy.json"
    config.write_text(json.dumps({"backends": [
        {"name": "big", "urlPrefix": f"{backend.url}/scheduler", "filterVerb": "filter", "weight": 1,
         "httpTimeout": "60s", "nodeCacheCapable": True},
        {"name": "warm", "urlPrefix": f"{backend.url}/scheduler", "filterVerb": "small", "weight": 1,
         "httpTimeout": "60s", "nodeCacheCapable": True},
    ]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "EXTPROXY_", "DJANGO_"))}
    env.update(EXTPROXY_CONFIG=str(config), EXTPROXY_DATA_DIR=str(tmp_path), EXTPROXY_MAX_REPLY_BYTES=str(cap),
               EXTPROXY_LOG_LEVEL="WARNING")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "extproxy.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
        cwd=ROOT, env=env,
    )
    recorder = subprocess.Popen([sys.executable, "manage.py", "recorder"], cwd=ROOT, env=env)  # as `make run`
    base = f"http://127.0.0.1:{port}"
    db = tmp_path / "extproxy.sqlite3"

    def recorded() -> int:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM extproxy_call").fetchone()[0]

    try:
        wait_until(lambda: _ready(base), 60, "extproxy did not start")
        request = fixture_bytes(FILTER_NAMES)
        for _ in range(3):  # warm up: every code path of a call has run once
            assert requests.post(base + "/extender/warm/small", data=request, timeout=30).status_code == 200
        wait_until(lambda: recorded() == 3, 30, "the warm-up calls were not recorded")
        baseline, _ = peak_and_current_rss(server.pid)

        with requests.post(base + "/extender/big/filter", data=request, stream=True, timeout=120) as resp:
            assert resp.status_code == 200
            got = digest_of(resp.iter_content(1 << 20))
        wait_until(lambda: recorded() == 4, 60, "the big call was not recorded")
        peak, _ = peak_and_current_rss(server.pid)

        assert got == digest_of(names_reply_chunks(total_names))
        # A whole-body read alone would add the 200 MB reply (and its copies) to the peak.
        assert peak - baseline < 4 * cap, f"peak RSS grew by {(peak - baseline) >> 20} MiB (cap {cap >> 20} MiB)"
        print(f"peak RSS grew by {(peak - baseline) >> 20} MiB (cap {cap >> 20} MiB)")
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            findings, body = conn.execute(
                "SELECT findings, response_body FROM extproxy_call WHERE backend = 'big'"
            ).fetchone()
        assert f"reply of {length} bytes" in json.loads(findings)[-1]["detail"]
        assert len(zlib.decompress(body)) == cap + 1
    finally:
        server.terminate()
        server.wait(30)
        recorder.terminate()
        recorder.wait(30)


def _ready(base: str) -> bool:
    try:
        return requests.get(base + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False
