"""Every dropped call is on the record as a gap: the serving process writes its drops down as
gap records in the spool, the recorder stores them (and the torn or unreadable records it finds)
as RecordingGap rows, and an export of their range says so in its signed manifest.

Counted end to end: calls answered == calls in the API + calls in gap rows, by reason, with
the real server, spool and recorder process under real overload.
"""
from __future__ import annotations

import io
import json
import os
import time
from datetime import datetime, timedelta, timezone as tz

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from extproxy.config import RecordingConfig
from extproxy.exportsigning import verify_here as verify
from extproxy.models import Call, RecordingGap
from extproxy.recording import SpoolRecorder, dropcount
from extproxy.recording.spool import HEADER, SpoolSettings
from extproxy.recording.spool_writer import SpoolWriter
from extproxy.recording.trace import Drops, encode_gap, encode_trace
from tests.conftest import RecorderProcess, fixture_bytes, pass_all, wait_for_drain
from tests.processes import Load, stored_calls
from tests.test_export import auditor
from tests.test_recorder import drain, make_trace
from tests.test_recording_processes import dropped, install, names_body  # noqa: F401 (install: a fixture)
from tests.test_spool import tear

pytestmark = pytest.mark.timeout(300)


def gaps_by_reason() -> dict[str, int]:
    found: dict[str, int] = {}
    for gap in RecordingGap.objects.all():
        found[gap.reason] = found.get(gap.reason, 0) + gap.calls
    return found


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# --- the serving side: drops -> gap records ------------------------------------------------


def test_it_carries_drops_over_while_the_spool_refuses_the_gap_record(tmp_path, monkeypatch):
    monkeypatch.setattr(dropcount, "GAP_EVERY", 3600.0)  # only the first record, or one asked for now
    writer = SpoolWriter(SpoolSettings(root=tmp_path / "spool", max_bytes=10))  # nothing fits
    drops = dropcount.DropCounter()
    drops.add("spool-full", 3)
    assert drops.write_gap(writer) is False and drops.pending == 3  # refused: kept in memory
    drops.add("spool-full", 2)
    drops.add("queue-full")
    writer.settings = SpoolSettings(root=tmp_path / "spool")  # the recorder drained: room again
    assert drops.write_gap(writer) is True and drops.pending == 0 and drops.gap_records == 1
    drops.add("queue-full")
    assert drops.write_gap(writer) is False and drops.gap_records == 1  # at most one a GAP_EVERY
    assert drops.write_gap(writer, now_please=True) is True and drops.gap_records == 2  # shutdown
    assert drops.counts == {"spool-full": 5, "queue-full": 2}
    writer.close()


def test_it_stores_the_hand_offs_drops_as_gaps_flushed_at_shutdown_and_once_only(transactional_db, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setattr(dropcount, "GAP_EVERY", 3600.0)  # the first record now, the next one only at shutdown
    before = datetime.now(tz.utc)
    recorder = SpoolRecorder(RecordingConfig(queue_size=5), SpoolSettings(root=tmp_path / "spool"))
    accepted = [recorder.submit(make_trace()) for _ in range(12)]  # not started: nothing leaves memory
    assert accepted.count(False) == 7
    recorder.start()
    assert recorder.flush(20)
    wait_until(lambda: recorder.drops.gap_records == 1, "no gap record for the hand-off's drops")
    assert recorder.submit(make_trace(findings=[{"kind": object()}]))  # cannot be encoded: dropped
    assert recorder.flush(20) and recorder.drops.pending == 1  # within GAP_EVERY: still in memory
    assert recorder.stop()  # SIGTERM: the rest of the drops reach the spool too
    assert recorder.drops.gap_records == 2 and recorder.drops.pending == 0
    recorder_process = RecorderProcess(tmp_path / "spool", None)
    try:
        wait_for_drain(tmp_path / "spool", recorder_process, {recorder.writer.name: recorder.writer.seq})
    finally:
        recorder_process.stop()
    assert Call.objects.count() == 5 and gaps_by_reason() == {"queue-full": 7, "unencodable": 1}
    gap = RecordingGap.objects.get(reason="queue-full")
    assert before <= gap.first_at <= gap.last_at <= datetime.now(tz.utc)


def test_it_stores_torn_and_unreadable_spool_records_as_gaps(transactional_db, tmp_path):
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool"))
    recorder.start()
    assert recorder.submit(make_trace())
    assert recorder.flush(20)
    recorder.writer.append([b"\x92not a trace"])  # a record this recorder cannot read
    assert recorder.stop()
    tear(recorder.writer, 10)  # then a SIGKILL mid-write: a torn tail, its writer gone
    recorder_process = RecorderProcess(tmp_path / "spool", None)
    try:
        wait_until(lambda: gaps_by_reason() == {"unreadable": 1, "torn": 1},
                   f"no torn/unreadable gaps: {gaps_by_reason()}")
    finally:
        recorder_process.stop()
    assert Call.objects.count() == 1


def test_drops_alike_in_every_value_are_each_a_row_and_a_batch_read_again_adds_none(transactional_db, tmp_path):
    """Two gap records with the same reason, count and times (two serving processes, or a clock
    stepped back), two unreadable records, a torn tail: each is a row. After the recorder stops
    between a batch's commit and moving the cursor, the same batch read again adds no row."""
    settings = SpoolSettings(root=tmp_path / "spool")
    same = [Drops("queue-full", 3, 1_700_000_000.25, 1_700_000_000.5)]
    writers = [SpoolWriter(settings), SpoolWriter(settings)]  # serve and serve-2
    for writer in writers:
        writer.append([encode_gap(same), encode_gap(same), b"\x92not a trace"])
    writers[1].close()
    tear(writers[0], 10)
    os.close(writers[0]._lock_fd)  # then killed mid-write: its torn tail is found once it is gone
    expected = {"queue-full": 12, "unreadable": 2, "torn": 1}
    first = drain(tmp_path)
    assert gaps_by_reason() == expected and RecordingGap.objects.count() == 4 + 2 + 1
    assert first.counters.dropped == {"unreadable": 2, "torn": 1}
    for writer in ("serve", "serve-2"):
        (tmp_path / "spool" / writer / "cursor").unlink()  # as if the recorder died before marking them
    again = drain(tmp_path)
    assert gaps_by_reason() == expected and RecordingGap.objects.count() == 7
    assert again.counters.write_errors == 0  # found stored, not refused by the unique key
    assert all(len(key) == 32 for key in RecordingGap.objects.values_list("key", flat=True))


def test_a_bug_writing_down_drops_keeps_the_counts_for_the_next_round(tmp_path, monkeypatch):
    writer = SpoolWriter(SpoolSettings(root=tmp_path / "spool"))
    drops = dropcount.DropCounter()
    drops.add("queue-full", 3)
    real = dropcount.encode_gap
    monkeypatch.setattr(dropcount, "encode_gap", lambda taken: 1 / 0)
    assert drops.write_gap(writer, now_please=True) is False and drops.pending == 3
    monkeypatch.setattr(dropcount, "encode_gap", real)
    assert drops.write_gap(writer, now_please=True) is True and drops.pending == 0
    writer.close()


def test_a_write_cut_short_counts_only_the_calls_that_did_not_reach_the_spool(transactional_db, tmp_path, monkeypatch):
    """The disk fills in the middle of a gathered write: the first call's frame is whole in the
    file (the recorder stores it), the other two are spool-error drops; none is both."""
    from extproxy.recording import spool_writer

    real_pwritev, real_pwrite, state = os.pwritev, os.pwrite, {"cut": False, "failed": False}

    def pwritev(fd, buffers, offset):
        if not state["cut"]:  # the calls' first write: the kernel takes only the first frame
            state["cut"] = True
            return real_pwritev(fd, buffers[:2], offset)
        return real_pwritev(fd, buffers, offset)

    def pwrite(fd, data, offset):
        if state["cut"] and not state["failed"]:  # ... and the rest finds the disk full
            state["failed"] = True
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(spool_writer.os, "pwritev", pwritev)
    monkeypatch.setattr(spool_writer.os, "pwrite", pwrite)
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool"))
    for _ in range(3):
        assert recorder.submit(make_trace())  # not started: one batch, one write
    recorder.start()
    assert recorder.flush(20) and state["failed"]
    assert recorder.stop()
    assert recorder.spooled == 1 and recorder.drops.counts == {"spool-error": 2}
    drain(tmp_path)
    assert Call.objects.count() == 1 and gaps_by_reason() == {"spool-error": 2}


def test_drops_at_a_full_spool_are_written_down_until_shutdown(transactional_db, tmp_path, monkeypatch):
    """At the bound, gap records use a reserve the calls may not, and the last one, at shutdown,
    may pass the bound: every call answered is stored or in a gap, none only in memory."""
    monkeypatch.setattr(dropcount, "GAP_EVERY", 0.0)  # a gap record every round
    one = len(encode_trace(make_trace()))
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool", max_bytes=one * 20))
    assert recorder.spool.gap_reserve < 20 * (HEADER.size + len(encode_gap([Drops("spool-full", 1, 1.0, 2.0)])))
    recorder.start()
    for _ in range(60):
        assert recorder.submit(make_trace())
        assert recorder.flush(20)
    drop_rounds = 60 - recorder.spooled  # a spool-full drop each, written down the round after
    assert recorder.drops.gap_records < drop_rounds - 1  # the reserve was spent: some were refused
    assert recorder.stop()
    assert recorder.drops.pending == 0
    drain(tmp_path)
    assert Call.objects.count() == recorder.spooled and 0 < recorder.spooled < 20
    assert gaps_by_reason() == {"spool-full": 60 - recorder.spooled}


# --- end to end: real overload, the API, the export ----------------------------------------


def api_calls(client) -> int:
    count, url = 0, "/api/calls/?page_size=500"
    while url:
        page = client.get(url).json()
        count += len(page["results"])
        url = page["next"]
    return count


def test_every_call_answered_under_overload_is_in_the_api_or_in_a_gap_and_the_export_says_so(
    proxy, write_config, backend_server, tmp_path
):
    started = datetime.now(tz.utc) - timedelta(seconds=1)
    backend = backend_server({"filter": pass_all})
    # A hand-off of one call: whatever arrives while the spool-writer is busy is dropped.
    server = proxy(write_config(
        {"backends": [{"name": "gpu", "urlPrefix": f"{backend.url}/scheduler", "filterVerb": "filter",
                       "nodeCacheCapable": True}], "recording": {"queueSize": 1}}))
    load = Load(f"{server.url}/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"),
                concurrency=16).run(600)
    assert load.failed == 0
    drops = server.recorder.drops
    wait_until(lambda: drops.pending == 0, "the drops were not written down as a gap record")

    def all_gaps_stored() -> bool:
        # pending reads 0 once the spool-writer has taken the counts, before its gap record is
        # appended: a flush in that moment can drain the spool without it (347 of 355 once in CI).
        server.flush()
        return gaps_by_reason() == drops.counts

    wait_until(all_gaps_stored, "the gap records did not all reach the database")
    client = auditor()
    stored = api_calls(client)
    gaps = gaps_by_reason()
    assert gaps == drops.counts and gaps.get("queue-full", 0) > 0
    assert load.answered == stored + sum(gaps.values())
    listed = client.get("/api/gaps/?reason=queue-full&page_size=500").json()["results"]
    assert sum(g["calls"] for g in listed) == gaps["queue-full"] and listed == sorted(
        listed, key=lambda g: g["first_at"], reverse=True)
    page = Client()
    page.force_login(User.objects.get(username="audrey"))
    shown = page.get("/audit/").content.decode()
    assert "Gaps in the records" in shown and f"<td>queue-full</td><td>{listed[0]['calls']} call" in shown

    until = (datetime.now(tz.utc) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    since = started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    response = client.get(f"/api/export/?format=ndjson&since={since}&until={until}")
    body = b"".join(response.streaming_content)
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/").json()
    assert manifest["calls"] == stored and manifest["complete"] is False
    assert {g["reason"]: g["calls"] for g in manifest["gaps"]} == gaps
    verdict = verify(io.BytesIO(body), manifest)
    assert verdict.ok and not verdict.complete and "NOT complete" in verdict.message
    assert f"{gaps['queue-full']} queue-full" in verdict.message

    # A range without drops, ended a minute before the load: past the span in which a call of it
    # could still be in flight (stored_up_to.py), so complete.
    before = (started - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    quiet = (started - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    response = client.get(f"/api/export/?format=ndjson&since={before}&until={quiet}")
    body = b"".join(response.streaming_content)
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/").json()
    assert manifest["gaps"] == [] and manifest["complete"] is True and verify(io.BytesIO(body), manifest).complete
    assert client.get(f"/api/gaps/?since={before}&until={quiet}").json()["results"] == []

    out = tmp_path / "calls.csv"
    call_command("export", "--format", "csv", "--since", since, "--until", until, "-o", str(out),
                 "--no-progress", stdout=io.StringIO(), stderr=io.StringIO())
    written = json.loads((tmp_path / "calls.csv.manifest.json").read_text())
    assert {g["reason"]: g["calls"] for g in written["gaps"]} == gaps
    with pytest.raises(CommandError, match=f"unaltered: .* NOT complete .*{gaps['queue-full']} queue-full"):
        call_command("verify_export", str(out), f"{out}.manifest.json", stdout=io.StringIO())


def test_a_call_whose_record_cannot_be_built_is_answered_and_counted(proxy, write_config, backend_server,
                                                                     monkeypatch):
    """A bug building one call's record (put aside on the serving loop): that call is answered,
    counted unencodable and in a gap; the calls around it are recorded."""
    from extproxy import engine

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [{"name": "gpu", "urlPrefix": f"{backend.url}/scheduler",
                                               "filterVerb": "filter", "nodeCacheCapable": True}]}))
    real, calls = engine.trace_of, []

    def trace_of(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise TypeError("a field of an unexpected type")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "trace_of", trace_of)
    load = Load(f"{server.url}/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"),
                concurrency=1).run(5)
    assert load.failed == 0 and load.answered == 5
    wait_until(lambda: len(calls) == 5, "not every call's record was built")
    drops = server.recorder.drops
    assert drops.counts == {"unencodable": 1}

    def stored() -> bool:
        server.flush()
        return gaps_by_reason() == {"unencodable": 1} and Call.objects.count() == 4

    wait_until(stored, f"not stored: {Call.objects.count()} calls, gaps {gaps_by_reason()}")


def gap_rows(inst) -> dict[str, int]:
    """Calls in gap rows by reason, read from the installation's database directly."""
    import sqlite3

    with sqlite3.connect(inst.env["EXTPROXY_SQLITE_PATH"]) as conn:
        return dict(conn.execute("SELECT reason, SUM(calls) FROM extproxy_recordinggap GROUP BY reason").fetchall())


def test_drops_at_the_full_spool_of_a_serving_process_become_gaps_once_the_recorder_makes_room(install):
    # The real serving process (uvicorn) and recorder process; no recorder at first and a spool
    # of ~60 calls, so the rest is refused (spool-full) and the gap records compete for room.
    inst = install(EXTPROXY_SPOOL_MAX_BYTES=str(60 * 6000))
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=4).run(400)
    assert load.failed == 0
    inst.wait_spooled()
    assert dropped(inst).get("spool-full", 0) > 0
    inst.start_recorder()
    wait_until(lambda: gap_rows(inst) == dropped(inst), f"gaps {gap_rows(inst)} != drops {dropped(inst)}", 60)
    inst.wait_drained()
    rows, distinct = stored_calls(inst)
    assert rows == distinct and rows + gap_rows(inst)["spool-full"] == load.answered
