"""Recording without the spool, in the calling thread: for tools and unit tests.

Owns `LocalRecorder`, which has the hot path's `submit` but writes in the caller's thread when
`flush` (or `write_batch`) is called. Production never uses it: the serving process hands
calls to the spool (handoff.py) and the recorder process drains it (writer.py).
"""
from __future__ import annotations

from typing import Any

from ..config import RecordingConfig, RedactionConfig, RetentionConfig
from .trace import Trace
from .writer import BatchWriter


class LocalRecorder:
    def __init__(self, recording: RecordingConfig | None = None, redaction: RedactionConfig | None = None,
                 retention: RetentionConfig | None = None, **_: Any) -> None:
        self.recording = recording or RecordingConfig()
        self.retention = retention  # applied once before the first write, as the recorder process does
        self.writer = BatchWriter(redaction or RedactionConfig())
        self.pending: list[Trace] = []
        self.published: list[list[dict[str, Any]]] = []

    @property
    def keeping(self) -> bool:
        return self.recording.enabled

    def submit(self, trace: Trace) -> bool:
        if not self.recording.enabled:
            return False
        self.pending.append(trace)
        return True

    def write_batch(self, traces: list[Trace]) -> list[dict[str, Any]]:
        summaries = self.writer.write(traces)
        self.published.append(summaries)
        return summaries

    def flush(self, timeout: float = 0.0) -> bool:
        if self.retention is not None:
            from .retention import prune

            prune(self.retention)
            self.retention = None
        size = max(1, self.recording.batch_size)
        while self.pending:
            batch, self.pending = self.pending[:size], self.pending[size:]
            self.write_batch(batch)
        return True

    def stop(self, timeout: float = 0.0) -> bool:
        return self.flush()
