"""The serving process's live listener (recording/live.py) stopping with the recorder connected.

Stopping the serving process cancels the listener's connection handlers. Python 3.11's
start_unix_server then asks a cancelled handler for its exception, which raises, and asyncio
logged an ERROR with a CancelledError traceback for each recorder connected at every stop.
A real listener on its abstract socket, a real connection, a loop that ends as uvicorn's does.
"""
from __future__ import annotations

import asyncio
import logging

from extproxy.recording.live import socket_address, start_listener


def test_a_serving_process_that_stops_with_the_recorder_connected_logs_no_error(tmp_path, caplog):
    async def serve_then_stop() -> None:
        server = await start_listener(tmp_path, "serve")
        _reader, writer = await asyncio.open_unix_connection(socket_address(tmp_path, "serve"))  # the recorder
        await asyncio.sleep(0.05)  # its handler waits for a message
        server.close()
        writer.close()  # the recorder's end: the handler is cancelled before it could read the close
        # asyncio.run now cancels the handler still waiting, as the serving loop's end does.

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(serve_then_stop())
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
