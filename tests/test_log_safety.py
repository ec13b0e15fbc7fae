"""No token or password in the server's log, with uvicorn's access log on; websocket refusals
reach a real client as close codes. A real server process (uvicorn, as `make run` starts it)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import requests

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXTPROXY_", "DATABASE_URL"))}
    env.update(DJANGO_SETTINGS_MODULE="extproxy.settings", EXTPROXY_DATA_DIR=str(tmp_path),
               EXTPROXY_ADMIN_PASSWORD="admin-pw-hunter2")
    for command in (["migrate", "--noinput", "-v", "0"], ["bootstrap"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True,
                       timeout=120)
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "extproxy.asgi:application", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "debug", "--lifespan", "on"],  # access log on, every websocket line
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except (requests.ConnectionError, requests.Timeout):  # a busy machine answers late: poll again
            pass
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield url, log
    process.terminate()
    process.wait(15)


async def websocket(url: str, query: str = "", protocols: tuple[str, ...] = ()) -> tuple[str | None, int | None]:
    """(first message, close code) of one connection to /ws/live/."""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url.replace("http", "ws") + "/ws/live/" + query, protocols=protocols) as ws:
            message = await ws.receive(timeout=10)
            if message.type == aiohttp.WSMsgType.TEXT:
                return message.data, None
            await ws.close()
            return None, ws.close_code


def test_it_keeps_tokens_and_passwords_out_of_the_server_log(server):
    url, log = server
    token = requests.post(url + "/api/auth/token/", data={"username": "admin", "password": "admin-pw-hunter2"},
                          timeout=10).json()["token"]

    assert asyncio.run(websocket(url, "?token=" + token))[0] == '{"type": "reset"}'
    assert asyncio.run(websocket(url, protocols=("extproxy", "extproxy.token." + token)))[0] == '{"type": "reset"}'
    requests.get(url + "/api/calls/?token=" + token, headers={"Authorization": f"Token {token}"}, timeout=10)
    requests.post(url + "/api/auth/token/", data={"username": "admin", "password": "wrong-hunter2"}, timeout=10)
    time.sleep(0.5)  # let the server write its last lines

    text = log.read_text()
    assert token not in text and "hunter2" not in text
    assert "/ws/live/?token=[redacted]" in text  # the lines are there, with the token taken out
    assert "/api/calls/?token=[redacted]" in text


def test_it_refuses_websockets_with_the_promised_close_codes(server):
    url, _ = server
    assert asyncio.run(websocket(url)) == (None, 4401)
    assert asyncio.run(websocket(url, "?token=not-a-token")) == (None, 4401)
