"""Shadow backends, end to end with the real processes: the serving process (uvicorn), the
recorder (`manage.py recorder`) and the shadow process (`manage.py shadow`), real backends on
loopback. A copy of each call reaches the shadow after the answer and is diffed against the
primary; a slow or dead shadow changes nothing the scheduler sees; the figures survive a restart
of the shadow process without counting twice; what the shadow process could not reach is
counted; without a shadow process the recorder still keeps the spool small.
"""
from __future__ import annotations

import json
import signal
import sys
import time

import pytest
import requests

from extproxy.config import ConfigError, parse_config
from extproxy.shadowstats import read_state_file
from tests.conftest import fixture_bytes, hang_up, pass_all, reply, slow
from tests.processes import Installation, Process, terminate
from tests.test_combined import failing, scores
from tests.test_replay import FULL, NAMES, PRIORITIZE

pytestmark = pytest.mark.timeout(300)

SHADOW = {"name": "gpu-next", "shadowOf": "gpu", "filterVerb": "filter", "prioritizeVerb": "prioritize",
          "bindVerb": "bind", "preemptVerb": "preempt", "weight": 2, "nodeCacheCapable": True, "httpTimeout": "1s"}


def with_shadow(primary_url: str, shadow_url: str, primary_cache: bool = True, **shadow_fields) -> dict:
    shadow = dict(SHADOW, urlPrefix=f"{shadow_url}/scheduler", **shadow_fields)
    return {"backends": [
        {"name": "gpu", "urlPrefix": f"{primary_url}/scheduler", "filterVerb": "filter", "prioritizeVerb": "prioritize",
         "bindVerb": "bind", "weight": 2, "nodeCacheCapable": primary_cache, "httpTimeout": "5s"},
        shadow,
    ]}


class Shadowed(Installation):
    """An installation with its shadow process."""

    def __init__(self, workdir, config: dict, **env: str) -> None:
        super().__init__(workdir, json.dumps(config), **env)
        self.shadow: Process | None = None
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("bootstrap")

    def start_shadow(self, *args: str) -> Process:
        self._starts += 1
        self.shadow = Process(f"shadow-{self._starts}",
                              [sys.executable, "manage.py", "shadow", "--nice", "0", "--no-idle-class", *args],
                              self.env, self.workdir / "logs")
        self._started.append(self.shadow)
        deadline = time.monotonic() + 60
        while read_state_file(self.spool).get("pid") != self.shadow.process.pid:  # its first save: it follows now
            assert self.shadow.process.poll() is None and time.monotonic() < deadline, self.shadow.output()
            time.sleep(0.05)
        return self.shadow

    def start_all(self, *shadow_args: str) -> "Shadowed":
        self.start_recorder("--nice", "0")
        self.start_serving()
        self.start_shadow(*shadow_args)
        return self

    def post(self, path: str, body: bytes) -> requests.Response:
        return requests.post(self.url + path, data=body, timeout=30, headers={"Content-Type": "application/json"})

    def figures(self) -> dict:
        """(per shadow: same/different/error; dropped by reason; skipped) from /metrics."""
        return {k: v for k, v in self.metrics().items() if k.startswith("extproxy_shadow_") and "_created" not in k}

    def wait_for(self, what, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while not what(got := self.figures()):
            if time.monotonic() > deadline:
                logs = self.shadow.output() if self.shadow else ""
                spool = sorted(str(p.relative_to(self.spool)) for p in self.spool.rglob("*"))
                state = (self.spool / "shadow.json").read_text() if (self.spool / "shadow.json").exists() else ""
                raise AssertionError(f"shadow figures never got there: {got}\n{spool}\n{state}\n{logs}")
            time.sleep(0.1)
        return got


def count(figures: dict, result: str) -> float:
    return figures.get(f'extproxy_shadow_calls_total{{result="{result}",shadow="gpu-next"}}', 0.0)


def down(figures: dict) -> float:
    return figures.get('extproxy_shadow_dropped_total{reason="shadow-down",shadow="gpu-next"}', 0.0)


def compared(figures: dict) -> float:
    return count(figures, "same") + count(figures, "different")


def login(inst: Installation) -> requests.Session:
    session = requests.Session()
    page = session.get(inst.url + "/accounts/login/", timeout=10)
    session.post(inst.url + "/accounts/login/", timeout=10, data={
        "username": "admin", "password": "s3cret", "csrfmiddlewaretoken": page.cookies["csrftoken"]})
    return session


@pytest.fixture
def shadowed(tmp_path):
    made: list[Shadowed] = []

    def make(config: dict, **env: str) -> Shadowed:
        inst = Shadowed(tmp_path / f"i{len(made)}", config, **env)
        made.append(inst)
        return inst

    yield make
    for inst in made:
        inst.close()


def test_it_keeps_shadows_out_of_the_schedulers_chain_and_checks_the_primary():
    config = parse_config(with_shadow("http://a:1", "http://b:2"), "<test>")
    assert [b.name for b in config.backends] == ["gpu"]
    assert [(s.name, s.shadow_of) for s in config.shadows] == [("gpu-next", "gpu")]

    with pytest.raises(ConfigError) as bad:
        parse_config(with_shadow("http://a:1", "http://b:2", shadowOf="gpu-old"), "<test>")
    assert "backends[1].shadowOf" in str(bad.value) and "'gpu-old'" in str(bad.value)
    with pytest.raises(ConfigError) as only:
        parse_config({"backends": [{"name": "a", "urlPrefix": "http://a:1", "filterVerb": "f", "shadowOf": "a"}]}, "<test>")
    assert "shadowOf" in str(only.value)


def test_a_shadow_that_disagrees_shows_in_the_counts_and_examples(backend_server, shadowed):
    primary = backend_server({"filter": pass_all, "bind": reply(200, b'{"Error":""}')})
    # A reason that echoes a secret: kept redacted in shadow.json, the API and the page, as the recorder stores it.
    shadow = backend_server({"filter": failing({"gpu-node-1": "new version: <i>no</i> room, token=hunter2-shadow"}),
                             "bind": reply(200, b'{"Error":""}')})
    inst = shadowed(with_shadow(primary.url, shadow.url)).start_all()

    answers = [inst.post("/extender/gpu/filter", fixture_bytes(NAMES)) for _ in range(4)]
    inst.post("/extender/filter", fixture_bytes(NAMES))  # combined: the gpu part is mirrored
    inst.post("/extender/gpu/bind", fixture_bytes("captured-kube-scheduler-1.24/bind-request.nodecache-true.json"))
    got = inst.wait_for(lambda f: compared(f) >= 5)

    assert all(json.loads(a.content)["FailedNodes"] == {} for a in answers)  # the primary's answer
    assert [path for path, _ in shadow.received] == ["/scheduler/filter"] * 5  # never a bind
    assert count(got, "different") == 5 and count(got, "same") == 0 and count(got, "error") == 0
    session = login(inst)
    api = session.get(inst.url + "/api/shadows/", timeout=10).json()
    row = api["results"][0]
    assert (row["shadow"], row["primary"], row["calls"], row["different"], row["different_rate"]) == ("gpu-next", "gpu", 5, 5, 1.0)
    assert row["kinds"] == {"passed->failed": 5} and row["dropped_total"] == 0 and api["process"]["reported"]
    assert row["examples"][0]["nodes"][0] == {"node": "gpu-node-1", "backend": "gpu", "kind": "passed->failed",
                                              "before": None, "after": "new version: <i>no</i> room, token=[redacted]"}
    page = session.get(inst.url + "/shadows/", timeout=10).text
    assert "gpu-next" in page and "100.0%" in page and "&lt;i&gt;no&lt;/i&gt;" in page and "<i>no</i>" not in page
    assert "hunter2" not in page + (inst.spool / "shadow.json").read_text()


def test_a_shadow_that_agrees_is_sent_its_own_mode_and_counted_alike(backend_server, shadowed):
    primary = backend_server({"filter": pass_all, "prioritize": scores({"gpu-node-1": 5})})
    shadow = backend_server({"filter": pass_all, "prioritize": scores({"gpu-node-1": 5})})
    inst = shadowed(with_shadow(primary.url, shadow.url, primary_cache=False)).start_all()

    inst.post("/extender/gpu/filter", fixture_bytes(FULL))  # the primary gets full Node objects
    for _ in range(2):
        inst.post("/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
    got = inst.wait_for(lambda f: compared(f) >= 3)

    sent = json.loads(shadow.received[0][1])
    assert sent["Nodes"] is None and len(sent["NodeNames"]) == 4  # names, for a nodeCacheCapable shadow
    assert count(got, "same") == 3 and count(got, "different") == 0


@pytest.mark.parametrize("behaviour", [slow(3, pass_all), hang_up], ids=["slow", "down"])
def test_a_slow_or_dead_shadow_changes_nothing_the_scheduler_sees(backend_server, shadowed, behaviour):
    primary = backend_server({"filter": pass_all, "prioritize": reply(200, b'[{"Host":"gpu-node-1","Score":7}]')})
    shadow = backend_server({"*": behaviour})
    inst = shadowed(with_shadow(primary.url, shadow.url)).start_all()
    expected = {
        "filter": requests.post(primary.url + "/scheduler/filter", data=fixture_bytes(NAMES), timeout=5),
        "prioritize": requests.post(primary.url + "/scheduler/prioritize", data=fixture_bytes(PRIORITIZE), timeout=5),
    }

    for _ in range(3):
        for verb, body in (("filter", NAMES), ("prioritize", PRIORITIZE)):
            got = inst.post(f"/extender/gpu/{verb}", fixture_bytes(body))
            assert (got.status_code, got.content) == (expected[verb].status_code, expected[verb].content)

    got = inst.wait_for(lambda f: compared(f) + down(f) >= 6)
    # Each call the shadow was sent, it timed out or failed; a shadow that keeps hanging up may
    # be rested before the last ones (dropped, counted).
    assert count(got, "different") + down(got) == 6 and count(got, "same") == 0
    api = login(inst).get(inst.url + "/api/shadows/", timeout=10).json()["results"][0]
    assert set(api["kinds"]) <= {"outcome:ok->timeout", "outcome:ok->error"}


def test_a_shadow_that_is_down_is_rested_and_its_calls_counted_as_dropped(backend_server, shadowed):
    from tests.conftest import free_port

    primary = backend_server({"filter": pass_all})
    inst = shadowed(with_shadow(primary.url, f"http://127.0.0.1:{free_port()}"))  # nobody listens there
    inst.start_recorder("--nice", "0")
    inst.start_serving()
    for _ in range(20):
        assert inst.post("/extender/gpu/filter", fixture_bytes(NAMES)).status_code == 200
    inst.wait_spooled()

    inst.start_shadow("--concurrency", "1", "--max-lag", "600")
    got = inst.wait_for(lambda f: compared(f) + down(f) >= 20)

    assert count(got, "different") >= 5 and down(got) >= 1  # refused 5 times in a row: rested
    assert count(got, "different") + down(got) == 20


def test_calls_older_than_the_lag_bound_are_dropped_and_counted(backend_server, shadowed):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": pass_all})
    inst = shadowed(with_shadow(primary.url, shadow.url))
    inst.start_recorder("--nice", "0")
    inst.start_serving()
    for _ in range(5):
        inst.post("/extender/gpu/filter", fixture_bytes(NAMES))
    inst.wait_spooled()

    inst.start_shadow("--max-lag", "0")  # every call is older than that by the time it is read
    got = inst.wait_for(lambda f: f.get('extproxy_shadow_dropped_total{reason="stale",shadow="gpu-next"}', 0) >= 5)

    assert compared(got) == 0 and shadow.received == []
    assert got['extproxy_shadow_dropped_total{reason="stale",shadow="gpu-next"}'] == 5


def test_a_restarted_shadow_process_resumes_without_counting_twice(backend_server, shadowed):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": failing({"gpu-node-2": "cordoned"})})
    inst = shadowed(with_shadow(primary.url, shadow.url)).start_all()
    for _ in range(5):
        inst.post("/extender/gpu/filter", fixture_bytes(NAMES))
    inst.wait_for(lambda f: compared(f) >= 5)

    inst.shadow.signal(signal.SIGKILL)  # no goodbye: what it saved is what it resumes from
    inst.shadow.wait(10)
    for _ in range(5):
        inst.post("/extender/gpu/filter", fixture_bytes(NAMES))
    inst.wait_spooled()
    inst.start_shadow()
    got = inst.wait_for(lambda f: compared(f) >= 10)
    time.sleep(0.5)  # a second save's worth: a call counted twice would show now
    got = inst.figures()

    assert count(got, "different") == 10 and count(got, "error") == 0
    assert len(shadow.received) >= 10  # a call sent after the last save is sent again, counted once
    assert terminate(inst.shadow, 30) == 0
    api = login(inst).get(inst.url + "/api/shadows/", timeout=10).json()["results"][0]
    assert api["calls"] == 10 and api["kinds"] == {"passed->failed": 10}


def test_the_recorder_cleans_the_spool_without_a_shadow_process_and_the_gap_is_counted(backend_server, shadowed):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": pass_all})
    # One segment per write: the recorder deletes each as soon as it has stored it.
    inst = shadowed(with_shadow(primary.url, shadow.url), EXTPROXY_SPOOL_SEGMENT_BYTES="1").start_all("--max-lag", "600")
    for _ in range(3):
        inst.post("/extender/gpu/filter", fixture_bytes(NAMES))
    inst.wait_for(lambda f: compared(f) >= 3)
    assert terminate(inst.shadow, 30) == 0

    for _ in range(20):  # nobody follows the spool but the recorder
        inst.post("/extender/gpu/filter", fixture_bytes(NAMES))
    inst.wait_drained()
    # The recorder deleted what it stored, shadow or not. It does so right after it moves its
    # cursor, which is what wait_drained sees: looked at until then, not only once.
    deadline = time.monotonic() + 10
    while len(segments := list((inst.spool / "serve").glob("*.seg"))) > 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(segments) <= 2, segments

    inst.start_shadow("--max-lag", "600")
    got = inst.wait_for(lambda f: compared(f) + f.get('extproxy_shadow_skipped_records_total{reason="deleted"}', 0) >= 23)

    skipped = got['extproxy_shadow_skipped_records_total{reason="deleted"}']
    assert skipped > 0 and compared(got) + skipped == 23
    assert len(shadow.received) == compared(got)
