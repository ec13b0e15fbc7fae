"""Serving an export: its chunks as the server sends them (a plain generator, or an async
iterator under ASGI), and its signed manifest saved once the last byte is out (models.Export).
export.py makes the records, the chain and the manifest.

An export whose records fail mid-stream (the database refused the next chunk of calls, say)
would leave a file that, without its manifest, reads as a shorter export. So ExportRun.lines
ends such a file with a mark no record can be (exportproof.interrupted_line) saying after how
many records and why, in words of our own (export.why_interrupted: the exception's class, never
its text: a database error can quote SQL and values; the trace goes to the server's log), and the
manifest says `interrupted`. A client that goes away mid-stream cannot be marked: nothing more
reaches it.
"""
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Generator, Iterable
from typing import Any

from django.utils import timezone

from .export import ExportRun

log = logging.getLogger(__name__)


def stream(run: ExportRun, records: Iterable[list[Any]]) -> Generator[bytes, None, None]:
    """The file's chunks; when the last one is out, the signed manifest is saved (models.Export)."""
    from .models import Export

    row = Export.objects.create(export_id=run.export_id, kind=run.kind, format=run.fmt, user=run.user,
                                filters=run.filters, started_at=run.started_at)
    yield from run.lines(records)
    if run.manifest is None:  # interrupted, and the database refused the manifest's questions too
        return
    row.finished_at = timezone.now()
    row.manifest = run.manifest
    _save_manifest(row)


def _save_manifest(row: Any, attempts: int = 5) -> None:
    """The file is out: its manifest must be kept. SQLite can refuse a write for a moment while
    other connections write (locked table); try again briefly rather than lose it."""
    import time

    from django.db import OperationalError

    for attempt in range(attempts):
        try:
            row.save(update_fields=["finished_at", "manifest"])
            return
        except OperationalError:
            if attempt == attempts - 1:
                log.exception("export %s: the manifest could not be saved", row.export_id)
                raise
            time.sleep(0.1 * (attempt + 1))


def _next_chunk(chunks: Generator[bytes, None, None]) -> bytes | None:
    return next(chunks, None)


async def as_async(chunks: Generator[bytes, None, None], run: ExportRun | None = None) -> AsyncIterator[bytes]:
    """Serve a sync chunk generator from the event loop without reading it all first: each
    chunk is produced in Django's sync thread (where its database cursor lives).

    When `run` was interrupted, its mark is the file's last line, and the transfer is broken
    off as well (the connection closed without the stream's end), so that a client that checks
    only the transfer (curl's exit status, a download manager) does not keep the file as whole.
    CancelledError is how: Django's handler takes it as the end of the response's sending (as
    for a client gone), closes the request and the response as usual, and the server, given
    an unfinished response, closes the connection. Any other exception would skip Django's
    clean-up."""
    import asyncio

    from asgiref.sync import sync_to_async

    step = sync_to_async(_next_chunk, thread_sensitive=True)
    try:
        while True:
            chunk = await step(chunks)
            if chunk is None:
                break
            yield chunk
    finally:
        await sync_to_async(chunks.close, thread_sensitive=True)()
    if run is not None and run.interrupted is not None:
        log.warning("export %s: interrupted; its transfer is broken off after the mark", run.export_id)
        raise asyncio.CancelledError(f"export {run.export_id} interrupted")
