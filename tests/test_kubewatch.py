"""The scheduler's own words through a fake Kubernetes API on loopback (list and watch of
events.k8s.io/v1 Events and of unassigned Pods): stored once, shown on the pod's page beside
the extender decisions, and used by pending pods (a binding the scheduler made by itself
takes a pod off the list; a FailedScheduling for in-tree reasons puts it on)."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from django.utils.html import escape

from dashboard import kubewatch
from extproxy import kube
from tests.conftest import write_kubeconfig
from tests.kubefake import FakeKubeAPI, Resource
from tests.test_dashboard_traffic import per_backend_attempt, scene, viewer  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def event(uid: str, reason: str, pod: str, note: str, count: int | None = None) -> dict:
    obj = {"kind": "Event", "apiVersion": "events.k8s.io/v1",
           "metadata": {"name": f"{pod}.{uid}", "namespace": "ml-team", "uid": uid, "resourceVersion": "7",
                        "creationTimestamp": now_iso()},
           "eventTime": now_iso(), "reportingController": "default-scheduler", "reportingInstance": "sched-1",
           "action": "Scheduling", "reason": reason, "type": "Warning" if reason == "FailedScheduling" else "Normal",
           "regarding": {"kind": "Pod", "namespace": "ml-team", "name": pod, "uid": f"uid-ml-team-{pod}"},
           "note": note}
    if count:
        obj["series"] = {"count": count, "lastObservedTime": now_iso()}
    return obj


def bound_pod(name: str, node: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ml-team", "uid": f"uid-ml-team-{name}", "resourceVersion": "9"},
            "spec": {"nodeName": node},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso()}]}}


class KubeAPI(FakeKubeAPI):
    """Events (events.k8s.io/v1) and unassigned Pods (v1), as the API server answers them."""

    def __init__(self) -> None:
        super().__init__({
            "/apis/events.k8s.io/v1/events": Resource(resource_version="5"),
            "/api/v1/pods": Resource(resource_version="5", query={"fieldSelector": ["spec.nodeName="]}),
        })
        self._events, self._pods = self.resources.values()

    events = property(lambda self: self._events.items, lambda self, v: setattr(self._events, "items", v))
    event_watch = property(lambda self: self._events.watch, lambda self, v: setattr(self._events, "watch", v))
    pod_watch = property(lambda self: self._pods.watch, lambda self, v: setattr(self._pods, "watch", v))


@pytest.fixture
def kube_api(tmp_path, monkeypatch):
    api = KubeAPI()
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.port))
    monkeypatch.setenv("EXTPROXY_KUBE_WATCH", "auto")
    kube.reset()
    yield api
    kubewatch.stop()
    kube.reset()
    api.close()


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_it_reads_event_rows_as_the_api_writes_them():
    row = kubewatch.event_row(event("e1", "Scheduled", "web", "Successfully assigned ml-team/web to node-07"))
    assert row is not None and (row["kind"], row["node"], row["pod_name"]) == ("Scheduled", "node-07", "web")
    assert kubewatch.event_row(event("e2", "Pulled", "web", "image pulled")) is None
    repeated = [kubewatch.event_row(event("e3", "FailedScheduling", "web", "0/3 nodes", count=n)) for n in (2, 3)]
    assert repeated[0]["key"] != repeated[1]["key"]  # each repeat of a series is kept
    assert kubewatch.binding_row(bound_pod("web", "node-02"))["node"] == "node-02"
    assert kubewatch.binding_row({"metadata": {"name": "web"}, "spec": {}}) is None


def test_the_schedulers_words_are_stored_redacted_and_bounded(kube_api, scene):
    """A FailedScheduling note quotes what the extenders said, secrets they echoed included."""
    from dashboard.models import SchedulerEvent

    echoed = "0/3 nodes are available: 3 env DB_PASSWORD=hunter2-note rejected, Bearer hunter2-bearer-note."
    kube_api.event_watch = [
        {"type": "ADDED", "object": event("e-secret", "FailedScheduling", "stuck-s", echoed)},
        {"type": "ADDED", "object": event("e-long", "FailedScheduling", "stuck-l", "x" * 20000 + " token=hunter2-tail")},
    ]
    per_backend_attempt(scene, "stuck-s", bind=False)
    scene.flush()

    assert kubewatch.start() is not None
    wait_for(lambda: SchedulerEvent.objects.count() == 2)

    stored = SchedulerEvent.objects.get(pod_name="stuck-s").message
    assert "hunter2" not in stored and stored.startswith("0/3 nodes are available: 3 env DB_PASSWORD=[redacted]")
    assert SchedulerEvent.objects.get(pod_name="stuck-l").message == "x" * kubewatch.MESSAGE_MAX
    page = viewer().get("/pods/ml-team/stuck-s/").content.decode()
    assert "FailedScheduling" in page and "DB_PASSWORD=[redacted]" in page and "hunter2" not in page


def test_an_event_with_nul_in_its_note_or_pod_name_is_stored_with_the_rest(kube_api, scene):
    """PostgreSQL takes no NUL in text: a list holding such an event failed whole, at each retry."""
    from dashboard.models import SchedulerEvent

    kube_api.events = [event("e-nul", "FailedScheduling", "stuck\u0000n", "0/3 nodes: \u0000 odd"),
                       event("e-ok", "FailedScheduling", "stuck-ok", "0/3 nodes are available")]
    assert kubewatch.start() is not None
    wait_for(lambda: SchedulerEvent.objects.count() == 2)
    odd = SchedulerEvent.objects.get(pod_name="stuck\ufffdn")
    assert odd.message == "0/3 nodes: \ufffd odd" and odd.pod_uid == "uid-ml-team-stuck\ufffdn"


def test_it_is_off_without_a_kubernetes_api(monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("EXTPROXY_KUBE_WATCH", "auto")
    assert not kubewatch.wanted() and kubewatch.start() is None and not kubewatch.watching()
    monkeypatch.setenv("EXTPROXY_KUBE_WATCH", "sometimes")
    with pytest.raises(ValueError, match="EXTPROXY_KUBE_WATCH"):
        kubewatch.wanted()


def test_it_shows_the_schedulers_words_and_uses_them_for_pending_pods(kube_api, scene):
    from dashboard.models import SchedulerEvent

    failed = ("0/7 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector, "
              "2 node(s) had untolerated taint {dedicated: infra}. preemption: 0/7 nodes are available.")
    kube_api.events = [event("e-sched", "Scheduled", "trainer-y", "Successfully assigned ml-team/trainer-y to node-03")]
    kube_api.event_watch = [{"type": "ADDED", "object": event("e-fail", "FailedScheduling", "stuck-x", failed)},
                            {"type": "ADDED", "object": event("e-pull", "Pulled", "trainer-y", "pulled")}]
    kube_api.pod_watch = [{"type": "DELETED", "object": bound_pod("trainer-z", "node-02")}]
    # The extenders passed nodes for all three; no extender bound any of them.
    for pod in ("stuck-x", "trainer-y", "trainer-z"):
        per_backend_attempt(scene, pod, bind=False)
    scene.flush()

    assert kubewatch.start() is not None
    wait_for(lambda: SchedulerEvent.objects.count() == 3)
    assert kubewatch.watching()
    kubewatch.store([kubewatch.event_row(event("e-fail", "FailedScheduling", "stuck-x", failed))])
    assert SchedulerEvent.objects.count() == 3  # a second replica's copy is not stored twice

    client = viewer()
    pending = client.get("/pending/")
    assert [(p["name"], p["story"].state) for p in pending.context["pods"]] == [("stuck-x", "pending")]
    assert escape("the scheduler says: " + failed) in pending.content.decode()

    page = client.get("/pods/ml-team/stuck-x/")
    body = page.content.decode()
    assert page.context["story"].state == "pending" and escape(failed) in body and "FailedScheduling" in body
    y = client.get("/pods/ml-team/trainer-y/").context["story"]
    assert (y.state, y.node, y.bound_by) == ("bound", "node-03", "the scheduler (its Scheduled event)")
    z = client.get("/pods/ml-team/trainer-z/")
    assert (z.context["story"].state, z.context["story"].node) == ("bound", "node-02")
    assert "spec.nodeName is node-02" in z.content.decode()


def test_a_pod_the_extenders_never_saw_shows_the_schedulers_words_and_why_there_are_no_calls(kube_api, scene):
    """In-tree filters left no node, so kube-scheduler called no extender: the pod has no calls,
    and its page says why that happens and shows the scheduler's event, as text."""
    from dashboard.models import SchedulerEvent

    failed = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu <img src=x onerror=alert(1)>."
    kube_api.events = [event("e-none", "FailedScheduling", "never-called", failed)]
    assert kubewatch.start() is not None
    wait_for(lambda: SchedulerEvent.objects.filter(pod_name="never-called").exists())
    page = viewer().get("/pods/ml-team/never-called/")
    body = page.content.decode()
    assert page.status_code == 200 and "No calls recorded for this pod." in body
    assert "its own PreFilter and Filter plugins left at least one node" in body
    assert escape(failed) in body and "FailedScheduling" in body and "<img src=x" not in body
