"""A combined call's part that extproxy did not make (the backend was not called: registered
with names, a full-object backend whose Node objects extproxy does not have) is no call of the
primary: the shadow is not sent it and it is not counted as a difference or an error. Real
serving, recorder and shadow processes, real backends on loopback."""
from __future__ import annotations

import pytest

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_replay import FULL, NAMES, PRIORITIZE
from tests.test_shadow import compared, count, login, shadowed, with_shadow  # noqa: F401 (shadowed: the fixture)

pytestmark = pytest.mark.timeout(300)


def test_a_part_extproxy_did_not_make_is_not_mirrored_nor_counted(backend_server, shadowed):
    primary = backend_server({"filter": pass_all, "prioritize": reply(200, [])})
    shadow = backend_server({"filter": pass_all, "prioritize": reply(200, [])})
    # The primary needs full Node objects; the scheduler sends names and there is no node cache.
    inst = shadowed(with_shadow(primary.url, shadow.url, primary_cache=False)).start_all()

    not_made = [inst.post("/extender/filter", fixture_bytes(NAMES)), inst.post("/extender/prioritize", fixture_bytes(PRIORITIZE))]
    assert "was not called" in not_made[0].json()["Error"] and primary.received == []
    # Then a call the primary did answer (its own, per-backend, with full Node objects as it needs): once it is compared, the
    # shadow process has read past the combined ones.
    assert inst.post("/extender/gpu/filter", fixture_bytes(FULL)).status_code == 200
    got = inst.wait_for(lambda f: compared(f) >= 1)

    assert [path for path, _ in shadow.received] == ["/scheduler/filter"]
    assert (count(got, "same"), count(got, "different"), count(got, "error")) == (1, 0, 0)
    row = login(inst).get(inst.url + "/api/shadows/", timeout=10).json()["results"][0]
    assert (row["calls"], row["different"], row["errors"], row["kinds"]) == (1, 0, 0, {})
