"""The recorder's publisher to a channel layer that does not answer (Redis hung): each batch's
live events are lost (the gap in their numbers tells the dashboards to refetch), and the log
says why, once per interval, not with an empty reason for every batch (a timeout's text is
empty)."""
from __future__ import annotations

import asyncio
import logging

from extproxy.ratelog import RateLimitedLog
from extproxy.recording import live


class HungLayer:
    async def group_send(self, group, message):
        await asyncio.sleep(3600)


def test_a_layer_that_never_answers_is_logged_once_with_its_reason(monkeypatch, caplog):
    monkeypatch.setattr(live, "SEND_TIMEOUT", 0.02)
    monkeypatch.setattr("channels.layers.get_channel_layer", lambda: HungLayer())
    RateLimitedLog.forget_all()
    publisher = live.LayerPublisher()
    try:
        with caplog.at_level(logging.WARNING, logger="extproxy.recording.live"):
            for _ in range(5):
                publisher([{"id": 1}])
    finally:
        publisher.close()
    lines = [r.getMessage() for r in caplog.records if "live events not published" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].rstrip().endswith("TimeoutError"), lines
