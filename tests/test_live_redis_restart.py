"""A Redis outage on the live stream: a server on the Redis channel layer (its own throwaway
redis-server on a free port, never the shared one) streams a call; Redis goes away while a call
is served (its publish is lost) and comes back; the next message the browser gets is a `reset`,
so it refetches instead of showing a feed with a silent hole."""
from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
import requests

from tests.conftest import fixture_bytes, free_port, reply
from tests.services import redis_server_binary
from tests.test_live_redis import Server, manage, server_env
from tests.test_per_backend import config_for


class RedisServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.answers():
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def redis_server():
    server = RedisServer(free_port())
    server.start()
    yield server
    server.stop()


async def next_message(ws, timeout: float = 15.0) -> dict:
    return json.loads((await ws.receive(timeout=timeout)).data)


def test_it_sends_reset_after_redis_comes_back(backend_server, postgres_url, redis_server, tmp_path):
    import aiohttp

    backend = backend_server({"filter": reply(200, fixture_bytes("filter-result.nodecache-true.json"))})
    config = tmp_path / "extproxy.json"
    config.write_text(json.dumps(config_for(backend.url, nodeCacheCapable=True)))
    env = server_env(postgres_url, f"redis://127.0.0.1:{redis_server.port}/0", str(config))
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "bootstrap")
    server = Server(env)

    def call() -> None:
        response = requests.post(server.url + "/extender/gpu/filter", data=fixture_bytes("filter-request.nodecache-true.json"),
                                 timeout=10)
        assert response.status_code == 200  # the scheduler is answered, Redis or not

    async def scenario() -> list[str]:
        token = requests.post(server.url + "/api/auth/token/", data={"username": "admin", "password": "admin-pw"},
                              timeout=10).json()["token"]
        loop = asyncio.get_running_loop()
        seen = []
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(server.url.replace("http", "ws") + f"/ws/live/?token={token}") as ws:
                assert await next_message(ws) == {"type": "reset"}
                await loop.run_in_executor(None, call)
                seen.append((await next_message(ws))["type"])

                await loop.run_in_executor(None, redis_server.stop)
                await loop.run_in_executor(None, call)  # recorded; its live event cannot be published
                await asyncio.sleep(1.5)
                await loop.run_in_executor(None, redis_server.start)
                await asyncio.sleep(2.0)  # the layer reconnects and subscribes again

                deadline = loop.time() + 30
                while loop.time() < deadline:  # publish until one gets through
                    await loop.run_in_executor(None, call)
                    try:
                        seen.append((await next_message(ws, timeout=2))["type"])
                        break
                    except asyncio.TimeoutError:
                        continue
        return seen

    try:
        seen = asyncio.run(scenario())
    finally:
        server.stop()
    assert seen[0] == "calls/add"
    assert seen[1] == "reset"  # not a silent hole: the browser refetches, and the lost call is in the snapshot
