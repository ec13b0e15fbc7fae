"""extproxy/ratelog.py: one line per kind per interval, with the count of what was left out."""
from __future__ import annotations

import logging

from extproxy.ratelog import RateLimitedLog


def test_a_kind_is_logged_once_per_interval_then_with_the_count_left_out(caplog, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("extproxy.ratelog.time.monotonic", lambda: clock[0])
    log = RateLimitedLog(logging.getLogger("extproxy.test_ratelog"), interval=60)
    caplog.set_level(logging.WARNING, logger="extproxy.test_ratelog")

    assert log.emit(logging.WARNING, "bad", "bad request: %s", "one")
    assert not log.emit(logging.WARNING, "bad", "bad request: %s", "two")
    assert not log.emit(logging.WARNING, "bad", "bad request: %s", "three")
    assert log.emit(logging.WARNING, "other", "another kind")  # kinds are counted apart
    clock[0] += 61
    assert log.emit(logging.WARNING, "bad", "bad request: %s", "four")

    assert [r.getMessage() for r in caplog.records] == [
        "bad request: one", "another kind", "bad request: four (2 more like it in the last 60s not logged)"]


def test_forget_all_lets_every_kind_log_again(caplog):
    log = RateLimitedLog(logging.getLogger("extproxy.test_ratelog"), interval=3600)
    caplog.set_level(logging.WARNING, logger="extproxy.test_ratelog")
    assert log.emit(logging.WARNING, "bad", "first")
    assert not log.emit(logging.WARNING, "bad", "again")
    RateLimitedLog.forget_all()
    assert log.emit(logging.WARNING, "bad", "after forgetting")
    assert [r.getMessage() for r in caplog.records] == ["first", "after forgetting"]
