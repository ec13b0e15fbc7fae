"""What the dashboard stores beside the call records (which only the recorder writes):

* `SchedulerEvent`: the scheduler's own words about a pod, as the Kubernetes API showed them
  (FailedScheduling and Scheduled events, and bindings seen as a pod's spec.nodeName), written
  by dashboard/kubewatch.py only.
* `LatencyCell` and `RollupMark`: calls counted per backend, verb, minute and latency bucket,
  written by dashboard/rollup.py only, so the backends page and the feed's summary band read
  a few hundred aggregated rows whatever the number of recorded calls.
"""
from __future__ import annotations

from django.db import models


class SchedulerEvent(models.Model):
    class Kind(models.TextChoices):
        FAILED = "FailedScheduling"
        SCHEDULED = "Scheduled"
        BOUND = "Bound"  # spec.nodeName seen on the pod, whoever bound it

    # The API object's uid (events) or "<pod uid>/<node>" (bindings): several replicas
    # watching the same cluster store each one once.
    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    pod_namespace = models.CharField(max_length=253)
    pod_name = models.CharField(max_length=253)
    pod_uid = models.CharField(max_length=64, blank=True, default="")
    node = models.CharField(max_length=253, blank=True, default="")
    message = models.TextField(blank=True, default="")
    reporter = models.CharField(max_length=253, blank=True, default="")  # reportingController
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["pod_namespace", "pod_name", "-at"], name="sched_event_pod"),
                   models.Index(fields=["-at"], name="sched_event_at")]
        ordering = ["-at", "-id"]


class LatencyCell(models.Model):
    """Calls of one backend and verb that started in one minute with latency in one bucket."""

    backend = models.CharField(max_length=63)
    verb = models.CharField(max_length=16)
    minute = models.IntegerField()  # minutes since the epoch (UTC): whole-number slots in SQL
    bucket = models.SmallIntegerField()  # index into dashboard.rollup.UPPER_EDGES_MS
    calls = models.IntegerField(default=0)
    errors = models.IntegerField(default=0)
    timeouts = models.IntegerField(default=0)
    # The slowest of them (ms): a percentile in this bucket is no higher. A cell counted before
    # it was kept holds the bucket's upper edge (migration 0002).
    slowest_ms = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["backend", "verb", "minute", "bucket"], name="latency_cell_key")]
        indexes = [models.Index(fields=["minute"], name="latency_cell_minute")]


class RollupMark(models.Model):
    """How far the roll-up has read the call table (one row)."""

    name = models.CharField(max_length=32, primary_key=True)
    last_id = models.BigIntegerField(default=0)
    # A gap in the ids above last_id (a batch not committed yet) is waited for until then.
    gap_since = models.DateTimeField(null=True)
