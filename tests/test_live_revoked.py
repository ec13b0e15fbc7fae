"""An open /ws/live/ socket is closed when its user loses access: logged out, deactivated,
role taken away, token deleted. Through the real ASGI stack (session and token auth, router)
with WebsocketCommunicator, on the configured channel layer, as tests/test_live_consumer.py."""
from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from extproxy.recorder import LIVE_GROUP
from tests.test_live_consumer import summary

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, params=["in-memory", "redis"])
def layer(request, settings):
    """Each test on both channel layers: the change is told from a request's thread, the
    socket listens on the server's loop."""
    if request.param == "redis":
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                                               "CONFIG": {"hosts": [request.getfixturevalue("redis_url")]}}}
    else:  # named, not assumed: with EXTPROXY_REDIS_URL set (CI's second run) the default is Redis
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert ("Redis" in type(get_channel_layer()).__name__) == (request.param == "redis")
    yield request.param


@database_sync_to_async
def viewer(username: str = "v") -> tuple[Client, str, str]:
    """A viewer logged in (its client and session cookie) and its API token."""
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user(username, password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    assert client.login(username=username, password="pw")
    return client, client.cookies["sessionid"].value, Token.objects.create(user=user).key


async def open_socket(session: str = "", token: str = "") -> WebsocketCommunicator:
    from extproxy.asgi import application

    headers = [(b"host", b"localhost"), (b"origin", b"http://localhost")]
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    communicator = WebsocketCommunicator(application, "/ws/live/" + (f"?token={token}" if token else ""), headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    assert await communicator.receive_json_from() == {"type": "reset"}
    return communicator


async def closed_with(communicator: WebsocketCommunicator) -> int:
    """The close code the socket gets, with a call published after the change: none reaches it."""
    await get_channel_layer().group_send(LIVE_GROUP, {"type": "calls.batch", "calls": [summary(1)]})
    message = await communicator.receive_output(timeout=3)
    assert message["type"] == "websocket.close", message
    return message["code"]


async def still_open(communicator: WebsocketCommunicator) -> None:
    await get_channel_layer().group_send(LIVE_GROUP, {"type": "calls.batch", "calls": [summary(2)]})
    assert (await communicator.receive_json_from(timeout=3))["type"] in ("calls/add", "calls/batch")
    await communicator.disconnect()


def change(action):
    @database_sync_to_async
    def apply(client: Client, username: str) -> None:
        from django.contrib.auth.models import Group, User
        from rest_framework.authtoken.models import Token

        user = User.objects.get(username=username)
        if action == "logout":
            assert client.post("/accounts/logout/").status_code in (200, 302)
        elif action == "deactivate":
            user.is_active = False
            user.save()
        elif action == "role removed":
            user.groups.remove(Group.objects.get(name="viewer"))
        elif action == "roles cleared":
            user.groups.clear()
        elif action == "role's permissions cleared":
            Group.objects.get(name="viewer").permissions.clear()
        elif action == "token deleted":
            Token.objects.filter(user=user).delete()

    return apply


@pytest.mark.parametrize("action, code", [
    ("logout", 4401), ("deactivate", 4401), ("role removed", 4403), ("roles cleared", 4403),
    ("role's permissions cleared", 4403),
])
async def test_a_session_socket_is_closed_when_its_user_loses_access(action, code):
    client, session, _ = await viewer()
    other_client, other_session, _ = await viewer("w")  # another user's socket stays open
    socket, other = await open_socket(session=session), await open_socket(session=other_session)

    await change(action)(client, "v")

    assert await closed_with(socket) == code
    if action != "role's permissions cleared":  # that one takes the role from every viewer
        await still_open(other)


async def test_a_token_socket_is_closed_when_its_token_is_deleted():
    client, _, token = await viewer()
    socket = await open_socket(token=token)
    await change("token deleted")(client, "v")
    assert await closed_with(socket) == 4401


async def test_logging_out_one_session_leaves_the_users_token_socket_open():
    client, session, token = await viewer()
    by_session, by_token = await open_socket(session=session), await open_socket(token=token)
    await change("logout")(client, "v")
    assert await closed_with(by_session) == 4401
    await still_open(by_token)


def test_the_recheck_is_sent_once_the_change_is_committed_and_not_for_a_login(monkeypatch):
    """A socket rechecking before the commit (another thread, process or replica) reads the
    access as it was and stays open: the admin and `manage.py user role` change in a transaction."""
    from django.contrib.auth.models import Group, User
    from django.db import transaction

    from dashboard import live_access

    sent: list[set] = []
    monkeypatch.setattr(live_access, "_send", lambda pks, fields: sent.append(set(pks)))
    user = User.objects.create_user("rechecked", password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    with transaction.atomic():
        user.groups.clear()  # pre_clear: the users are found before the rows go
        assert sent == []
    assert sent == [{user.pk}]
    assert Client().login(username="rechecked", password="pw")  # saves last_login: no recheck
    assert sent == [{user.pk}]


def group_change(action):
    @database_sync_to_async
    def apply(role: str) -> None:
        from django.contrib.auth.models import Group, Permission

        from extproxy.roles import Perm

        group = Group.objects.get(name=role)
        view_calls = Permission.objects.get(codename=Perm.VIEW_CALLS.split(".", 1)[1])
        if action == "group deleted":
            group.delete()
        elif action == "permission removed from the group":
            group.permissions.remove(view_calls)
        elif action == "group removed from the permission":
            view_calls.group_set.remove(group)
        elif action == "group's permissions set":
            group.permissions.set(group.permissions.exclude(pk=view_calls.pk))
        elif action == "permission deleted":
            view_calls.delete()

    return apply


@pytest.mark.parametrize("action", ["group deleted", "permission removed from the group",
                                    "group removed from the permission", "group's permissions set",
                                    "permission deleted"])
async def test_a_socket_is_closed_when_its_users_group_or_its_permission_goes(action):
    """Deleting a group (its memberships go with it, without an m2m signal) or a permission, or
    taking a permission from a group: every member's socket rechecks; another role's stays open."""
    from django.contrib.auth.models import Group, User

    client, session, token = await viewer()
    _, other_session, _ = await viewer("w")

    @database_sync_to_async
    def other_role() -> None:
        user = User.objects.get(username="w")
        user.groups.set([Group.objects.get(name="developer")])

    await other_role()
    by_session, by_token = await open_socket(session=session), await open_socket(token=token)
    other = await open_socket(session=other_session)

    await group_change(action)("viewer")

    assert await closed_with(by_session) == 4403
    assert await closed_with(by_token) == 4403
    if action != "permission deleted":  # that one takes the stream from every role
        await still_open(other)


def test_a_group_deleted_tells_its_members_once_committed_and_not_when_rolled_back(monkeypatch):
    """Its members are read before the memberships go (pre_delete), and told after the commit."""
    from django.contrib.auth.models import Group, User
    from django.db import transaction

    from dashboard import live_access

    sent: list[set] = []
    monkeypatch.setattr(live_access, "_send", lambda pks, fields: sent.append(set(pks)))
    team = Group.objects.create(name="team")
    members = [User.objects.create_user(f"m{i}", password="pw") for i in range(2)]
    for member in members:
        member.groups.add(team)
    outsider = User.objects.create_user("outsider", password="pw")

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        team.delete()
        raise Undo
    assert sent == []  # rolled back: nobody lost anything
    with transaction.atomic():
        Group.objects.filter(name="team").delete()  # the admin's "delete selected" deletes a queryset
        assert sent == []
    assert sent == [{m.pk for m in members}] and outsider.pk not in sent[0]


async def test_a_token_socket_is_closed_when_its_token_expires(settings):
    """Expiry was checked only when a socket connected: one opened a second before its token
    expired (EXTPROXY_TOKEN_MAX_AGE) kept receiving calls for as long as it stayed open."""
    import datetime

    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    settings.EXTPROXY_TOKEN_MAX_AGE = 3600
    _, _, token = await viewer()
    _, _, other_token = await viewer("w")  # a token far from its end: its socket stays open
    born = timezone.now() - datetime.timedelta(seconds=3600 - 1)
    await database_sync_to_async(lambda: Token.objects.filter(key=token).update(created=born))()
    socket, other = await open_socket(token=token), await open_socket(token=other_token)
    message = await socket.receive_output(timeout=5)
    assert message == {"type": "websocket.close", "code": 4401}
    await still_open(other)
