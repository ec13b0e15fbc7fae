"""The /ws/live/ consumer in-process, through the real ASGI stack (origin check, session and
token auth, router) with WebsocketCommunicator: authentication, reset-then-stream, batching,
and what happens at the buffer bound."""
from __future__ import annotations


import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from extproxy.recorder import LIVE_GROUP

pytestmark = pytest.mark.django_db(transaction=True)


def summary(i: int) -> dict:
    return {"id": i, "verb": "filter", "backend": "gpu", "pod": {"namespace": "ml", "name": f"p{i}", "uid": ""},
            "outcome": "ok", "duration_ms": 1.0, "error": ""}


@database_sync_to_async
def token_for(username: str, superuser: bool = True) -> str:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user(username, password="pw", is_superuser=superuser)
    return Token.objects.create(user=user).key


async def connect(query: str = "") -> tuple[WebsocketCommunicator, bool, int | None]:
    from extproxy.asgi import application

    communicator = WebsocketCommunicator(application, "/ws/live/" + query)
    connected, code = await communicator.connect()
    return communicator, connected, code


async def open_stream() -> WebsocketCommunicator:
    communicator, connected, _ = await connect("?token=" + await token_for("op"))
    assert connected
    assert await communicator.receive_json_from() == {"type": "reset"}  # the client loads its snapshot
    return communicator


async def publish(*batches: list[dict]) -> None:
    layer = get_channel_layer()
    for calls in batches:
        await layer.group_send(LIVE_GROUP, {"type": "calls.batch", "calls": calls})


async def refusal_code(query: str = "", headers: list | None = None) -> int:
    """The close code of a refused connection: accepted, then closed at once with the code."""
    from extproxy.asgi import application

    communicator = WebsocketCommunicator(application, "/ws/live/" + query, headers=headers or [])
    connected, _ = await communicator.connect()
    assert connected  # accepted only so that the close code reaches the client
    message = await communicator.receive_output(timeout=2)
    assert message["type"] == "websocket.close"
    return message["code"]


async def test_it_closes_anonymous_connections():
    assert await refusal_code() == 4401


async def test_it_closes_connections_with_a_bad_token():
    assert await refusal_code("?token=nope") == 4401
    assert await refusal_code(headers=[(b"sec-websocket-protocol", b"extproxy, extproxy.token.nope")]) == 4401


async def test_it_closes_connections_of_users_without_a_role():
    assert await refusal_code("?token=" + await token_for("nobody", superuser=False)) == 4403


async def test_it_takes_the_token_from_the_subprotocol_header_and_answers_extproxy():
    from extproxy.asgi import application

    token = await token_for("script")
    communicator = WebsocketCommunicator(application, "/ws/live/", subprotocols=["extproxy", f"extproxy.token.{token}"])
    connected, subprotocol = await communicator.connect()
    assert connected and subprotocol == "extproxy"
    assert await communicator.receive_json_from() == {"type": "reset"}
    await communicator.disconnect()


@pytest.mark.parametrize("allowed_hosts", [["localhost"], ["*"]])
async def test_it_closes_connections_from_another_origin_with_4403(settings, allowed_hosts):
    settings.ALLOWED_HOSTS = allowed_hosts
    token = await token_for("op")
    headers = [(b"host", b"localhost:8000"), (b"origin", b"http://evil.example")]
    assert await refusal_code("?token=" + token, headers) == 4403


async def test_it_accepts_its_own_origin_and_trusted_origins(settings):
    from extproxy.asgi import application

    settings.ALLOWED_HOSTS = ["dash.example"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://ui.example"]
    token = await token_for("op")
    for origin in (b"http://dash.example", b"https://ui.example"):
        headers = [(b"host", b"dash.example"), (b"origin", origin)]
        communicator = WebsocketCommunicator(application, "/ws/live/?token=" + token, headers=headers)
        connected, _ = await communicator.connect()
        assert connected and await communicator.receive_json_from() == {"type": "reset"}, origin
        await communicator.disconnect()
    headers = [(b"host", b"other.example"), (b"origin", b"http://other.example")]  # same origin, host not allowed
    assert await refusal_code("?token=" + token, headers) == 4403


async def test_it_sends_reset_then_streams_a_single_call_as_calls_add():
    communicator = await open_stream()
    await publish([summary(1)])
    assert await communicator.receive_json_from(timeout=2) == {"type": "calls/add", "payload": summary(1)}
    await communicator.disconnect()


async def test_it_batches_a_burst_of_group_messages_into_one_message(monkeypatch):
    import dashboard.consumers

    # A wide flush window, so that a loaded machine still publishes the burst inside it.
    monkeypatch.setattr(dashboard.consumers, "FLUSH_INTERVAL", 1.0)
    communicator = await open_stream()
    await publish(*[[summary(i)] for i in range(60)])  # 60 group messages

    message = await communicator.receive_json_from(timeout=2)

    assert message["type"] == "calls/batch"
    assert [c["id"] for c in message["payload"]] == list(range(60))
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_it_drops_the_buffer_and_sends_reset_at_the_bound(settings):
    settings.EXTPROXY_LIVE_BUFFER = 100
    communicator = await open_stream()
    await publish([summary(i) for i in range(60)], [summary(i) for i in range(60, 120)], [summary(120)])

    assert await communicator.receive_json_from(timeout=2) == {"type": "reset"}
    assert await communicator.receive_nothing(timeout=0.3)  # the dropped calls are not sent after it

    await publish([summary(200)])  # after the reset, streaming goes on
    assert (await communicator.receive_json_from(timeout=2))["payload"]["id"] == 200
    await communicator.disconnect()


async def test_it_accepts_the_session_cookie_of_a_logged_in_user():
    from django.test import Client

    @database_sync_to_async
    def session_cookie() -> str:
        from django.contrib.auth.models import User

        User.objects.create_superuser("browser", "", "pw")
        client = Client()
        assert client.login(username="browser", password="pw")
        return client.cookies["sessionid"].value

    from extproxy.asgi import application

    cookie = await session_cookie()
    communicator = WebsocketCommunicator(application, "/ws/live/", headers=[(b"cookie", f"sessionid={cookie}".encode())])
    connected, _ = await communicator.connect()
    assert connected and await communicator.receive_json_from() == {"type": "reset"}
    await communicator.disconnect()


def numbered(seq: int, *ids: int, origin: str = "replica-a") -> dict:
    return {"type": "calls.batch", "calls": [summary(i) for i in ids], "origin": origin, "seq": seq}


async def test_it_sends_reset_when_a_publishers_sequence_skips_a_message():
    communicator = await open_stream()
    layer = get_channel_layer()
    await layer.group_send(LIVE_GROUP, numbered(1, 1))
    assert (await communicator.receive_json_from(timeout=2))["payload"]["id"] == 1
    await layer.group_send(LIVE_GROUP, numbered(1, 50, origin="replica-b"))  # another process: its own numbers
    assert (await communicator.receive_json_from(timeout=2))["payload"]["id"] == 50
    await layer.group_send(LIVE_GROUP, numbered(2, 2))
    assert (await communicator.receive_json_from(timeout=2))["payload"]["id"] == 2

    await layer.group_send(LIVE_GROUP, numbered(4, 4))  # 3 was lost on the way

    assert await communicator.receive_json_from(timeout=2) == {"type": "reset"}
    assert await communicator.receive_nothing(timeout=0.3)  # the snapshot carries call 4
    await layer.group_send(LIVE_GROUP, numbered(5, 5))
    assert (await communicator.receive_json_from(timeout=2))["payload"]["id"] == 5
    await communicator.disconnect()


def test_it_reads_every_live_knob_from_the_environment():
    import os
    import subprocess
    import sys

    env = dict(os.environ, EXTPROXY_LIVE_BUFFER="123", EXTPROXY_LIVE_FLUSH_MS="250", EXTPROXY_PENDING_MINUTES="7",
               DJANGO_SETTINGS_MODULE="extproxy.settings")
    code = ("import django; django.setup(); from dashboard import consumers; from dashboard.queries import pending_window;"
            "print(consumers.buffer_bound(), consumers.FLUSH_INTERVAL, pending_window().total_seconds())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["123", "0.25", "420.0"], out.stderr
    bad = subprocess.run([sys.executable, "-c", code], env=dict(env, EXTPROXY_LIVE_BUFFER="lots"), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "EXTPROXY_LIVE_BUFFER='lots': expected an integer" in bad.stderr
