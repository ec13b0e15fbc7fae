"""What is stored: one row per scheduler call, its backend calls, and content-addressed blobs.

Bodies are stored compressed. A full-mode request's Node objects are stored once each, by the
SHA-256 of their redacted JSON, in `NodeObject`; the request blob then holds references
(`{"$node": "<sha256>"}`) in place of the items. Per-node decisions are stored as one
compressed JSON document per call instead of one row per node: a 5000-node call would
otherwise cost 5000 inserts on the recorder's write path. Timestamps, not durations
(durations are derived).

Over 400 lines because Django reads an app's models from this one module; each class here is
one table and its comments, nothing else.
"""
from __future__ import annotations

from django.db import models

# The one enum of each, defined in the pure core (models' choices, API and dashboard import them here too).
from extproxy.protocol import Verb
from extproxy.semantics import Outcome

from .roles import PERMISSIONS
from .timetext import iso_z


def new_call_id() -> str:
    """A fresh call id for rows made here (replays, tools): the time-ordered form the hot path
    makes (extproxy.recording.trace.new_call_id), so that they too land at the unique index's edge."""
    from extproxy.recording.trace import new_call_id as time_ordered

    return time_ordered()


class Form(models.TextChoices):
    PER_BACKEND = "per-backend"
    COMBINED = "combined"


class NodeObject(models.Model):
    """A distinct (redacted) Node object, stored once however many calls carried it."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    name = models.CharField(max_length=253, db_index=True)
    data = models.BinaryField()  # zlib-compressed JSON
    first_seen = models.DateTimeField(auto_now_add=True)
    # Refreshed (at most every few minutes) while calls still carry the node, so retention can
    # drop nodes no kept call refers to without reading every call's blob.
    last_seen = models.DateTimeField(auto_now_add=True, db_index=True)


class Call(models.Model):
    """One request the scheduler made to extproxy (per-backend, or combined)."""

    # Made on the hot path (a UUID string); unique, so a record drained twice is stored once.
    # The default serves rows made elsewhere (tools, tests, imports).
    call_id = models.CharField(max_length=36, unique=True, default=new_call_id)
    verb = models.CharField(max_length=16, choices=Verb.choices)
    backend = models.CharField(max_length=63)  # a backend name, or "combined"
    form = models.CharField(max_length=16, choices=Form.choices, default=Form.PER_BACKEND)
    pod_namespace = models.CharField(max_length=253, blank=True, default="")
    pod_name = models.CharField(max_length=253, blank=True, default="")
    pod_uid = models.CharField(max_length=64, blank=True, default="")
    # Links the calls of one pod's scheduling attempt (filter ... prioritize ... bind).
    attempt = models.CharField(max_length=100, blank=True, default="", db_index=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    http_status = models.IntegerField(null=True)  # the backend's status; null: no answer
    error = models.TextField(blank=True, default="")
    node_count = models.IntegerField(default=0)
    passed_count = models.IntegerField(default=0)
    failed_count = models.IntegerField(default=0)
    unresolvable_count = models.IntegerField(default=0)
    findings = models.JSONField(default=list)
    request_body = models.BinaryField()  # zlib-compressed; Node items replaced by references
    response_body = models.BinaryField()  # zlib-compressed, as the backend sent it
    response_status = models.IntegerField(null=True)  # what extproxy answered the scheduler
    decisions_blob = models.BinaryField()  # zlib-compressed JSON list of decisions
    # A replay (replay.py) is recorded like any call, linked to the call it re-ran, and kept
    # out of the operators' live feed and listings unless asked for.
    is_replay = models.BooleanField(default=False)
    replay_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays")
    # The node index (NodeSet): null when the call involved no node or the index is off. No
    # database constraint: a set is only deleted once no call refers to it (retention).
    node_set = models.ForeignKey("NodeSet", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                                 related_name="+")

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["-started_at", "-id"], name="call_newest"),
            # retention's maxCalls boundary, counted for recordings and replays apart each minute
            models.Index(fields=["is_replay", "-started_at", "-id"], name="call_replay_newest"),
            models.Index(fields=["pod_uid", "-started_at"], name="call_pod_uid"),
            models.Index(fields=["pod_namespace", "pod_name", "-started_at"], name="call_pod"),
            models.Index(fields=["backend", "verb", "-started_at"], name="call_backend_verb"),
            models.Index(fields=["outcome", "-started_at"], name="call_outcome"),
            # `error=...` (api.filters.errors_containing) reads only the calls with an error
            models.Index(fields=["-started_at", "-id"], condition=~models.Q(error=""), name="call_with_error"),
        ]

    def __str__(self) -> str:
        return f"{self.verb} {self.backend} {self.pod_namespace}/{self.pod_name}"

    def to_json(self, decisions: bool = False) -> dict:
        return call_to_json(self, decisions)

    def decisions(self) -> list[dict]:
        return _decisions(self.decisions_blob)


class BackendCall(models.Model):
    """One backend's part in a combined call."""

    call = models.ForeignKey(Call, related_name="backend_calls", on_delete=models.CASCADE)
    backend = models.CharField(max_length=63)
    verb = models.CharField(max_length=16, choices=Verb.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    http_status = models.IntegerField(null=True)
    error = models.TextField(blank=True, default="")
    findings = models.JSONField(default=list)
    request_body = models.BinaryField()
    response_body = models.BinaryField()
    decisions_blob = models.BinaryField()

    class Meta:
        ordering = ["started_at", "id"]
        # `backend=X` (api.filters.took_part): whether X has a part in a call, or all X's parts
        # for a rare X, from this index alone, not every part (figures: migration 0013).
        # `error=...` (api.filters.errors_containing): only the parts with an error are read.
        indexes = [models.Index(fields=["backend", "call"], name="part_backend_call"),
                   models.Index(fields=["call"], condition=~models.Q(error=""), name="part_with_error")]


def _decisions(blob: bytes) -> list[dict]:
    import json
    import zlib

    return json.loads(zlib.decompress(bytes(blob))) if blob else []


def _call_fields(obj) -> dict:
    return {
        "id": obj.id,
        "verb": obj.verb,
        "backend": obj.backend,
        "started_at": iso_z(obj.started_at),
        "finished_at": iso_z(obj.finished_at),
        "duration_ms": round((obj.finished_at - obj.started_at).total_seconds() * 1000, 3),
        "outcome": obj.outcome,
        "http_status": obj.http_status,
        "error": obj.error,
    }


def call_to_json(call: Call, decisions: bool = False) -> dict:
    """The one JSON shape of a call: the REST API and the live stream both use it."""
    data = _call_fields(call)
    data.update({
        "form": call.form,
        "pod": {"namespace": call.pod_namespace, "name": call.pod_name, "uid": call.pod_uid},
        "attempt": call.attempt,
        "node_count": call.node_count,
        "passed_count": call.passed_count,
        "failed_count": call.failed_count,
        "unresolvable_count": call.unresolvable_count,
        "response_status": call.response_status,
        "findings": call.findings,
        "is_replay": call.is_replay,
        "replay_of": call.replay_of_id,
    })
    if decisions:
        data["decisions"] = _decisions(call.decisions_blob)
        if call.form == Form.COMBINED:
            data["backend_calls"] = [backend_call_to_json(b) for b in call.backend_calls.all()]
    return data


def backend_call_to_json(bc: BackendCall) -> dict:
    data = _call_fields(bc)
    data["findings"] = bc.findings
    return data


class ConfiguredBackend(models.Model):
    """The backends of the loaded configuration, mirrored at start-up for the admin (read-only).

    The configuration file is the truth; this table is rewritten from it by `bootstrap`.
    """

    name = models.CharField(max_length=63, primary_key=True)
    position = models.IntegerField()
    target = models.CharField(max_length=2048)  # urlPrefix, or "policy:<name>"
    filter_verb = models.CharField(max_length=255, blank=True)
    prioritize_verb = models.CharField(max_length=255, blank=True)
    preempt_verb = models.CharField(max_length=255, blank=True)
    bind_verb = models.CharField(max_length=255, blank=True)
    weight = models.BigIntegerField(default=0)
    http_timeout_seconds = models.FloatField(default=5.0)
    node_cache_capable = models.BooleanField(default=False)
    ignorable = models.BooleanField(default=False)
    managed_resources = models.JSONField(default=list)
    config_source = models.CharField(max_length=2048, blank=True)

    class Meta:
        ordering = ["position"]

    def __str__(self) -> str:
        return self.name


class Access(models.Model):
    """No table: carries the custom permissions of the roles (see roles.py)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = PERMISSIONS


class AuditEvent(models.Model):
    """One thing a person (or a command) did that an auditor may ask about: who, when, what,
    from where. Written by extproxy/audit.py only; kept per its own retention."""

    at = models.DateTimeField()
    actor = models.CharField(max_length=150, blank=True)  # the username then: users can be renamed or deleted
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=512, blank=True)
    source = models.CharField(max_length=255, blank=True)  # remote address, or "cli"
    detail = models.JSONField(default=dict)

    class Meta:
        ordering = ["-at", "-id"]
        default_permissions = ()
        indexes = [
            models.Index(fields=["-at", "-id"], name="audit_newest"),
            models.Index(fields=["action", "-at"], name="audit_action"),
            models.Index(fields=["actor", "-at"], name="audit_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.at} {self.actor} {self.action} {self.target}"


class NodeSet(models.Model):
    """Index: one distinct set of (node, verdict) pairs that calls gave (API `?node=`).

    Each call points at the set of its pairs (Call.node_set): a node of the request without a
    verdict (bind's target, preempt's candidates, a call that failed before judging) is paired
    with "". Most calls share their set with many others, so a call costs one integer, and a
    set one row per pair, once. Written by the recorder (extproxy/nodeindex.py); a set no kept
    call refers to is deleted by retention (last_seen: as NodeObject's).
    """

    digest = models.CharField(max_length=64, unique=True)  # SHA-256 of the sorted pairs
    size = models.IntegerField(default=0)
    last_seen = models.DateTimeField(db_index=True)

    class Meta:
        default_permissions = ()


class NodeSetEntry(models.Model):
    """One (node, verdict) pair of a NodeSet."""

    node_set = models.ForeignKey(NodeSet, on_delete=models.CASCADE, related_name="entries", db_index=False)
    node = models.CharField(max_length=253)
    result = models.CharField(max_length=16, blank=True)

    class Meta:
        default_permissions = ()
        indexes = [
            models.Index(fields=["node", "result", "node_set"], name="nodesetentry_node"),
            models.Index(fields=["node_set"], name="nodesetentry_set"),
        ]


class RecordingGap(models.Model):
    """Calls that will never be (or no longer are) in the records, by reason, over a time range:
    dropped by the recorder, pruned by retention. Export manifests report the gaps they overlap."""

    first_at = models.DateTimeField()  # the earliest call concerned
    last_at = models.DateTimeField()  # the latest call concerned
    reason = models.CharField(max_length=64)
    calls = models.BigIntegerField()
    noted_at = models.DateTimeField()
    # Where the drop was found (gaps.drop_key): a batch read again after the recorder stopped
    # between its commit and moving the spool cursor finds its gaps stored by this key. Null
    # for retention's gaps, which merge, and for rows stored before it existed.
    key = models.CharField(max_length=32, null=True, unique=True)

    class Meta:
        ordering = ["first_at", "id"]
        default_permissions = ()
        indexes = [models.Index(fields=["last_at", "first_at"], name="gap_range")]


class SpoolReport(models.Model):
    """Each replica's recorder's last word on its own spool, so an export served by any replica
    (or `manage.py export` run anywhere) knows up to when every replica's calls are stored: a
    replica's spool and its calls in flight are seen only on its own disk (spool_reports.py)."""

    replica = models.CharField(max_length=255, unique=True)  # host name and spool directory
    reported_at = models.DateTimeField()
    # Every call of this replica's that started before it is in the database (as of reported_at);
    # null: not known (a killed serving process's calls not counted yet).
    stored_up_to = models.DateTimeField(null=True)
    reason = models.TextField(blank=True)  # why stored_up_to is not reported_at
    undrained = models.BigIntegerField(default=0)  # calls waiting in its spool
    # The recorder stopped with its spool empty and no serving process left: nothing of this
    # replica's can still arrive, until a recorder reports for it again.
    ended = models.BooleanField(default=False)

    class Meta:
        ordering = ["replica"]
        default_permissions = ()


class Export(models.Model):
    """One export: who asked for what, and (once the last record was sent) its signed manifest.
    An export whose manifest is null never finished (the client went away, or it failed)."""

    export_id = models.CharField(max_length=36, unique=True)
    kind = models.CharField(max_length=16)  # "calls" or "audit"
    format = models.CharField(max_length=16)
    user = models.CharField(max_length=150, blank=True)
    filters = models.JSONField(default=dict)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    manifest = models.JSONField(null=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        default_permissions = ()

# --- replay (replay lane) ------------------------------------------------------------------


class ReplayStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ReplayRun(models.Model):
    """One replay: which recorded calls, against what, and how far it got (replay.py)."""

    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    status = models.CharField(max_length=16, choices=ReplayStatus.choices, default=ReplayStatus.QUEUED)
    selector = models.JSONField(default=dict)  # {"call": id} | {"pod": "ns/name"} | {"filters": {...}}
    target = models.JSONField(default=dict)  # {"kind": "configured" | "url" | "policy", ...}
    allow_bind = models.BooleanField(default=False)
    rate = models.FloatField(default=20.0)  # calls per second at most
    total = models.IntegerField(default=0)  # calls selected
    done = models.IntegerField(default=0)  # calls replayed (or skipped) so far
    changed = models.IntegerField(default=0)  # calls whose decisions changed
    errors = models.IntegerField(default=0)  # calls that could not be replayed
    skipped = models.IntegerField(default=0)  # binds (not replayed unless asked)
    redacted = models.IntegerField(default=0)  # calls replayed with a request redaction changed
    counts = models.JSONField(default=dict)  # kind of change -> number of calls
    error = models.TextField(blank=True, default="")
    # The process holding the run (queued or running) and its last sign of life (replay/worker.py).
    owner = models.CharField(max_length=64, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True)
    cancel_requested_by = models.CharField(max_length=150, blank=True, default="")  # replay/cancel.py
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        default_permissions = ()  # roles.py: replay_calls

    @property
    def cancel_note(self) -> str:  # shown where the run's error is (API, pages, command)
        late = " (asked after the last call: the run had finished)" if self.status == ReplayStatus.DONE else ""
        return f"cancelled by {self.cancel_requested_by}{late}" if self.cancel_requested_at else ""

    @property
    def shown_target(self) -> dict:
        """The target as shown and audited: a URL's password redacted. The stored target keeps
        it, for the runner to call the URL; pages, the API and the audit trail (which auditors
        read without replay rights) never show it."""
        return shown_target(self.target)


def shown_target(target: dict) -> dict:
    from .redaction import url_without_password

    if isinstance(target.get("url"), str):
        return dict(target, url=url_without_password(target["url"]))
    return target


class ReplayItem(models.Model):
    """One call of a run: the original, its replay, and what changed (the diff, compressed)."""

    run = models.ForeignKey(ReplayRun, related_name="items", on_delete=models.CASCADE)
    original = models.ForeignKey(Call, null=True, on_delete=models.SET_NULL, related_name="+")
    replay = models.ForeignKey(Call, null=True, on_delete=models.SET_NULL, related_name="+")
    changed = models.BooleanField(default=False)
    kinds = models.JSONField(default=list)
    diff_blob = models.BinaryField(default=b"")  # zlib-compressed JSON diff (replay/diff.py)
    error = models.TextField(blank=True, default="")
    # What redaction changed in the request the target got (replay/diff.py kept_marks): a change
    # may then be the redaction's. Empty when it was sent as received.
    request_marks = models.JSONField(default=list)

    @property
    def redaction_note(self) -> str:
        from .replay.diff import redaction_note

        return redaction_note(self.request_marks)

    class Meta:
        ordering = ["id"]
        default_permissions = ()
        indexes = [models.Index(fields=["run", "changed"], name="replayitem_run_changed")]


class ReplayItemKind(models.Model):
    """One kind of change of one replay item, written with the item (replay/storing.store): the
    (run, kind, item) index that pages a run's items by kind (replay/paging.py; migration 0017 says why)."""

    run = models.ForeignKey(ReplayRun, related_name="+", on_delete=models.CASCADE, db_index=False)  # the index's prefix
    item = models.ForeignKey(ReplayItem, related_name="kind_rows", on_delete=models.CASCADE)
    kind = models.CharField(max_length=100)

    class Meta:
        default_permissions = ()
        indexes = [models.Index(fields=["run", "kind", "item"], name="replayitemkind_page")]
