"""The production storage for real: a server process on PostgreSQL (DATABASE_URL's server, or a
throwaway one: tests/services.py).

The server runs as `make run` runs it (migrate, bootstrap, uvicorn, and the recorder process
beside it), on a fresh database that the test creates and drops.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests

from tests.conftest import fixture_bytes, free_port, pass_all, reply

ROOT = Path(__file__).resolve().parent.parent


def start_server(env: dict[str, str], port: int) -> subprocess.Popen:
    for command in (["migrate", "--noinput", "-v", "0"], ["bootstrap"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "extproxy.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return process
        except (requests.ConnectionError, requests.Timeout):  # a busy machine answers late: poll again
            time.sleep(0.2)
    process.kill()
    output = process.stdout.read().decode()
    process.stdout.close()
    raise AssertionError(output)


def test_it_records_and_serves_calls_on_postgresql(postgres_url, backend_server, tmp_path):
    backend = backend_server({"filter": pass_all, "bind": reply(200, {"Error": ""})})
    config = tmp_path / "extproxy.yaml"
    config.write_text(
        f"backends:\n- name: gpu\n  urlPrefix: {backend.url}/scheduler\n  filterVerb: filter\n"
        "  bindVerb: bind\n  nodeCacheCapable: true\n"
    )
    env = dict(os.environ, DATABASE_URL=postgres_url, EXTPROXY_CONFIG=str(config), EXTPROXY_ADMIN_PASSWORD="s3cret",
               EXTPROXY_SPOOL_DIR=str(tmp_path / "spool"))
    env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)
    port = free_port()
    process = start_server(env, port)
    recorder = subprocess.Popen([sys.executable, "manage.py", "recorder"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(20):
            assert requests.post(f"{base}/extender/gpu/filter", data=fixture_bytes("filter-request.nodecache-true.json"), timeout=10).status_code == 200
        assert requests.post(f"{base}/extender/gpu/bind", data=fixture_bytes("bind-request.json"), timeout=10).json() == {"Error": ""}
        token = requests.post(f"{base}/api/auth/token/", data={"username": "admin", "password": "s3cret"}, timeout=10).json()["token"]
        headers = {"Authorization": f"Token {token}"}
        deadline = time.monotonic() + 20
        while True:
            calls = requests.get(f"{base}/api/calls/?page_size=100", headers=headers, timeout=10).json()["results"]
            if len(calls) == 21 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(calls) == 21
        assert calls[0]["verb"] == "bind"  # newest first
        assert {c["attempt"] for c in calls if c["verb"] == "bind"} <= {c["attempt"] for c in calls}
        detail = requests.get(f"{base}/api/calls/{calls[-1]['id']}/", headers=headers, timeout=10).json()
        assert [d["result"] for d in detail["decisions"]] == ["passed"] * 5
    finally:
        process.terminate()
        process.wait(15)
        process.stdout.close()
        recorder.terminate()
        recorder.wait(30)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM extproxy_call").fetchone()[0] == 21


def test_api_requests_do_not_pile_up_database_connections(postgres_url, backend_server, tmp_path):
    """The serving process takes its connections from a pool of EXTPROXY_DB_POOL_SIZE (3 here).
    320 API requests, 8 at a time, are all answered, with never more than 3 connections open
    (requests past them wait for one), and none is left open for each request served (before
    the pool: one per request thread, kept 60 s; 98 in a test server; PostgreSQL allows 100)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    backend = backend_server({"filter": pass_all})
    config = tmp_path / "extproxy.yaml"
    config.write_text(f"backends:\n- name: gpu\n  urlPrefix: {backend.url}/scheduler\n  filterVerb: filter\n")
    env = dict(os.environ, DATABASE_URL=postgres_url, EXTPROXY_CONFIG=str(config), EXTPROXY_ADMIN_PASSWORD="s3cret",
               EXTPROXY_SPOOL_DIR=str(tmp_path / "spool"), EXTPROXY_DB_POOL_SIZE="3")
    env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)
    port = free_port()
    process = start_server(env, port)
    base = f"http://127.0.0.1:{port}"
    database = postgres_url.rsplit("/", 1)[1]
    counts: list[int] = []
    done = threading.Event()

    def watch() -> None:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            while not done.is_set():
                # Clients only: an autovacuum worker on the new database is listed under it too.
                counts.append(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                           "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                                           (database,)).fetchone()[0])
                time.sleep(0.01)

    try:
        token = requests.post(f"{base}/api/auth/token/", data={"username": "admin", "password": "s3cret"}, timeout=10).json()["token"]
        headers = {"Authorization": f"Token {token}"}

        def forty(_: int) -> list[int]:
            with requests.Session() as session:
                return [session.get(f"{base}/api/calls/?page_size=5", headers=headers, timeout=30).status_code
                        for _ in range(40)]

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                statuses = [status for batch in pool.map(forty, range(8)) for status in batch]
        finally:
            done.set()
            watcher.join()
    finally:
        process.terminate()
        process.wait(15)
        process.stdout.close()
    assert statuses == [200] * 320
    assert len(counts) > 10 and max(counts) <= 3, f"at most {max(counts)} connections open"
