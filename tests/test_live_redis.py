"""Two server processes on the Redis channel layer and one PostgreSQL database: a websocket
client connected to process A sees a call that process B served and recorded."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes, free_port, reply
from tests.test_per_backend import config_for

ROOT = Path(__file__).resolve().parent.parent


def server_env(database_url: str, redis_url: str, config: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXTPROXY_", "DJANGO_"))}
    env.update(DATABASE_URL=database_url, EXTPROXY_REDIS_URL=redis_url, EXTPROXY_CONFIG=config,
               EXTPROXY_ADMIN_PASSWORD="admin-pw", DJANGO_SETTINGS_MODULE="extproxy.settings")
    return env


def manage(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)


class Server:
    """One replica: uvicorn and its recorder process (publishing to Redis), with its own spool."""

    def __init__(self, env: dict) -> None:
        import tempfile

        self.spool = tempfile.mkdtemp(prefix="extproxy-spool-")
        env = dict(env, EXTPROXY_SPOOL_DIR=self.spool)
        self.recorder = subprocess.Popen([sys.executable, "manage.py", "recorder"], cwd=ROOT, env=env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "extproxy.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--lifespan", "on", "--no-access-log"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):  # a busy machine answers late: poll again
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start: " + self.process.stderr.read().decode()[-2000:])
            time.sleep(0.2)

    def stop(self) -> None:
        import shutil

        for process in (self.process, self.recorder):
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.process.stderr.close()
        shutil.rmtree(self.spool, ignore_errors=True)


async def watch_for(url: str, token: str, pod: str, trigger) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url.replace("http", "ws") + f"/ws/live/?token={token}") as ws:
            assert json.loads((await ws.receive(timeout=10)).data) == {"type": "reset"}
            await asyncio.get_running_loop().run_in_executor(None, trigger)
            deadline = asyncio.get_running_loop().time() + 15
            while asyncio.get_running_loop().time() < deadline:
                message = json.loads((await ws.receive(timeout=15)).data)
                calls = [message["payload"]] if message["type"] == "calls/add" else message.get("payload") or []
                for call in calls:
                    if call["pod"]["name"] == pod:
                        return call
    raise AssertionError("the call never arrived on the other process's websocket")


def test_it_streams_a_call_served_by_one_process_to_a_client_of_another(backend_server, postgres_url, redis_url, tmp_path):
    backend = backend_server({"filter": reply(200, fixture_bytes("filter-result.nodecache-true.json"))})
    config = tmp_path / "extproxy.json"
    config.write_text(json.dumps(config_for(backend.url, nodeCacheCapable=True)))
    env = server_env(postgres_url, redis_url, str(config))
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "bootstrap")
    servers: list[Server] = []
    try:
        a, b = Server(env), Server(env)
        servers += [a, b]
        token = requests.post(a.url + "/api/auth/token/", data={"username": "admin", "password": "admin-pw"},
                              timeout=10).json()["token"]

        def call_b() -> None:
            response = requests.post(b.url + "/extender/gpu/filter", data=fixture_bytes("filter-request.nodecache-true.json"),
                                     timeout=10)
            assert response.status_code == 200

        call = asyncio.run(watch_for(a.url, token, "trainer-7d9c5b6f8-b4x2s", call_b))

        assert call["verb"] == "filter" and call["backend"] == "gpu" and call["passed_count"] == 2
        listed = requests.get(a.url + "/api/calls/", headers={"Authorization": f"Token {token}"}, timeout=10).json()
        assert [c["id"] for c in listed["results"]] == [call["id"]]  # one database behind both
    finally:
        for server in servers:
            server.stop()
