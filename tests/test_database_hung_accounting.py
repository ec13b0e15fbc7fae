"""A batch whose COMMIT the server took but never answered is found stored on the next try and
not stored again (tests/test_database_hung.py); here, that its calls are also accounted for:
each counted once in the recorder's written count and sent once to the live stream. Before,
the try that found them stored skipped them as if a previous process had counted them, so they
were in the database but in neither. PostgreSQL only, as tests/test_database_hung.py."""
from __future__ import annotations

import os
import socket
import threading
from collections import Counter

import msgspec
import pytest

from extproxy.models import Call
from extproxy.recording.live import LENGTH, socket_address
from extproxy.recording.observe import read_recorder_counters
from tests.conftest import wait_for_drain
from tests.tcprelay import COMMIT
from tests.test_database_hung import counters_past, recorder_through, relay_to_database, stored_once
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]


class LiveStream:
    """Stands where the serving process listens for the recorder's live events (the spool's
    writer `serve`): every stored call's id it is sent, with how many times."""

    def __init__(self, spool) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_address(spool, "serve"))
        self.listener.listen(4)
        self.ids: Counter[int] = Counter()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            while head := stream.read(LENGTH.size):
                (length,) = LENGTH.unpack(head)
                message = msgspec.msgpack.decode(stream.read(length))
                with self._lock:
                    self.ids.update(call["id"] for call in message["calls"])

    def seen(self) -> Counter[int]:
        with self._lock:
            return Counter(self.ids)

    def close(self) -> None:
        self.listener.close()


def stored_id(trace) -> int:
    return Call.objects.get(call_id=trace.call_id).id


def test_calls_whose_commit_was_never_answered_are_counted_written_and_sent_live_once(transactional_db, tmp_path):
    relay = relay_to_database()
    spool = tmp_path / "spool"
    first = make_trace()
    write_calls(spool, first)  # makes the writer directory `serve` the live events are sent for
    live = LiveStream(spool)
    # The in-memory channel layer: the recorder sends its live events over the local socket.
    recorder = recorder_through(relay, spool, {"EXTPROXY_REDIS_URL": ""})
    try:
        wait_for_drain(spool, recorder, timeout=60)
        wait_for(lambda: live.seen()[stored_id(first)] == 1, 30)
        counters = read_recorder_counters(spool)
        assert counters["written"] == 1
        relay.swallow_after(COMMIT)
        batch = [make_trace() for _ in range(10)]
        write_calls(spool, *batch)
        counters_past(spool, "write_errors", counters.get("write_errors", 0))
        assert stored_once(batch)  # committed, while the recorder holds it as not stored
        relay.relay_again()
        wait_for_drain(spool, recorder, timeout=120)
        assert stored_once(batch)
        assert read_recorder_counters(spool)["written"] == 1 + len(batch)
        everything = [stored_id(trace) for trace in [first, *batch]]
        wait_for(lambda: all(live.seen()[id_] >= 1 for id_ in everything), 30)
        assert live.seen() == Counter(everything)  # each once, nothing else
    finally:
        recorder.stop()
        relay.close()
        live.close()
