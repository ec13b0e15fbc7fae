"""Export benchmark: records per second and peak memory of `manage.py export`, of the HTTP
export served by uvicorn (ASGI), and of `verify_export`, at two sizes so that memory that grows
with the export shows up as a ratio (constant memory: ~1.0x for 4x the records).

A report, not a test: it exits non-zero only when something broke (a process failed, a file
did not verify). Each size gets a fresh SQLite database in a temp dir, filled in bulk with calls
shaped like the recorder's (100 decisions each, or 5, one call in ten without decisions).

    .venv/bin/python bench/export_bench.py            # (make bench runs it)
    BENCH_EXPORT_RECORDS=50000 .venv/bin/python bench/export_bench.py
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
UVICORN = str(ROOT / ".venv" / "bin" / "uvicorn")
BASE = int(os.environ.get("BENCH_EXPORT_RECORDS", "100000"))
TARGET = 50_000  # records/s

FILL = r"""
import json, os, sys, zlib
from datetime import datetime, timedelta, timezone
import django
django.setup()
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
from extproxy.models import Call
records, per_call = int(sys.argv[1]), int(sys.argv[2])
decisions = [{"node": f"node-{n:04d}", "backend": "gpu", "result": "failed" if n % 7 == 0 else "passed",
              "reason": "example.com/gpu: 2 of 4 devices are held by lower-priority pods" if n % 7 == 0 else None,
              "score": None, "weighted_score": None} for n in range(per_call)]
blob = zlib.compress(json.dumps(decisions).encode(), 1)
start = datetime(2026, 12, 1, tzinfo=timezone.utc)
calls, made, i = [], 0, 0
while made < records:
    empty = i % 10 == 9
    calls.append(Call(verb="bind" if empty else "filter", backend="gpu", pod_namespace="ml", pod_name=f"trainer-{i}",
                      pod_uid=f"uid-{i}", attempt=f"a-{i}", started_at=start + timedelta(milliseconds=i),
                      finished_at=start + timedelta(milliseconds=i + 3), outcome="ok", http_status=200,
                      node_count=0 if empty else per_call, request_body=b"", response_body=b"",
                      decisions_blob=b"" if empty else blob))
    made += 1 if empty else per_call
    i += 1
    if len(calls) >= 2000:
        Call.objects.bulk_create(calls); calls = []
Call.objects.bulk_create(calls)
user = User.objects.create_user("audrey", password="pw"); user.groups.add(Group.objects.get(name="auditor"))
print(Token.objects.create(user=user).key)
"""


def env_for(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EXTPROXY_SQLITE_PATH", "EXTPROXY_REDIS_URL")}
    env.update(EXTPROXY_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="extproxy.settings", EXTPROXY_SKIP_CONFIG_CHECK="1",
               EXTPROXY_EXPORT_KEY="bench-key-of-at-least-32-bytes-0123456789", PYTHONPATH=str(ROOT))
    return env


def run_child(args: list[str], env: dict[str, str], stderr: bool = False) -> tuple[float, float, str, str]:
    """(seconds, peak RSS MiB of that child alone, stdout, stderr), measured with wait4."""
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(args)} failed:\n{err.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out.decode(), err.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def http_export(env: dict[str, str], token: str, fmt: str) -> tuple[float, float, int]:
    port = free_port()
    server = subprocess.Popen([UVICORN, "extproxy.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                               "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                requests.get(url + "/healthz", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        before = vm_hwm(server.pid)
        started = time.perf_counter()
        size = 0
        with requests.get(f"{url}/api/export/?format={fmt}", headers={"Authorization": f"Token {token}"},
                          stream=True, timeout=600) as response:
            response.raise_for_status()
            for chunk in response.iter_content(chunk_size=None):
                size += len(chunk)
        seconds = time.perf_counter() - started
        return seconds, vm_hwm(server.pid) - before, size
    finally:
        server.terminate()
        server.wait(10)


def measure(records: int, per_call: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="extproxy-export-bench-") as tmp:
        data = Path(tmp)
        env = env_for(data)
        run_child([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], env)
        _, _, token, _ = run_child([PYTHON, "-c", FILL, str(records), str(per_call)], env)
        result: dict = {"records": records, "per_call": per_call}
        for fmt in ("ndjson", "csv"):
            out = data / f"calls.{fmt}"
            _, rss, _, said = run_child([PYTHON, "manage.py", "export", "--format", fmt, "-o", str(out), "--no-progress"],
                                        env, stderr=True)
            seconds = float(said.split(" in ")[1].split(" s ")[0])  # the command's own timing of the export loop
            manifest = json.loads(Path(f"{out}.manifest.json").read_text())
            result["records"] = manifest["records"]  # the fill stops at the first call past `records`
            _, vrss, said, _ = run_child([PYTHON, "manage.py", "verify_export", str(out), f"{out}.manifest.json"], env)
            assert "complete and unaltered" in said, said
            vseconds = float(said.split("checked in ")[1].split(" s")[0])
            hseconds, hgrowth, size = http_export(env, token.strip(), fmt)
            result[fmt] = {"command_s": seconds, "command_rss_mib": rss, "verify_s": vseconds, "verify_rss_mib": vrss,
                           "http_s": hseconds, "http_rss_growth_mib": hgrowth, "bytes": out.stat().st_size,
                           "http_bytes": size}
        return result


def main() -> None:
    small, large, few = measure(BASE, 100), measure(BASE * 4, 100), measure(BASE, 5)
    results = [small, large, few]
    print(f"\nexport benchmark (SQLite, {os.cpu_count()} cores shared with whatever else runs; target >= {TARGET:,} records/s)")
    print("command rec/s: as the command times its export loop (query, encode, hash, write);")
    print("verify rec/s: as verify_export times its check (read, split, hash, compare);")
    print("HTTP rec/s: one streamed GET /api/export/ from uvicorn, first byte to last; RSS growth: the server's VmHWM rise")
    print(f"{'records':>9} {'dec/call':>8} {'fmt':>6} | {'command rec/s':>13} {'peak RSS':>9} | {'HTTP rec/s':>10} {'RSS growth':>10} | "
          f"{'verify rec/s':>12} {'peak RSS':>9} | {'MB':>6}")
    for r in results:
        for fmt in ("ndjson", "csv"):
            m = r[fmt]
            n = r["records"]
            print(f"{n:>9,} {r['per_call']:>8} {fmt:>6} | {n / m['command_s']:>13,.0f} {m['command_rss_mib']:>7.0f}Mi | "
                  f"{n / m['http_s']:>10,.0f} {m['http_rss_growth_mib']:>8.1f}Mi | {n / m['verify_s']:>12,.0f} "
                  f"{m['verify_rss_mib']:>7.0f}Mi | {m['bytes'] / 1e6:>6.1f}")
    for fmt in ("ndjson", "csv"):
        ratio = large[fmt]["command_rss_mib"] / small[fmt]["command_rss_mib"]
        print(f"memory, {fmt}: peak RSS of the command at {large['records']:,} / at {small['records']:,} records = "
              f"{ratio:.2f}x (constant memory: ~1x for {large['records'] / small['records']:.0f}x the records)")
    worst = min(min(r["records"] / r[f]["command_s"], r["records"] / r[f]["http_s"])
                for r in results for f in ("ndjson", "csv"))
    print(f"slowest export (command or HTTP, either format): {worst:,.0f} records/s: "
          f"{'meets' if worst >= TARGET else 'MISSES'} the {TARGET:,}/s target")


if __name__ == "__main__":
    main()
