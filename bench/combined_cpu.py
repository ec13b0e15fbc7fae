"""The proxy's own CPU time on one combined filter call, per backend of the chain.

The combined entry's httpTimeout is the chain's sum plus COMBINED_TIMEOUT_MARGIN: what the proxy
spends between the backends' answers must fit in that margin. This measures that time alone,
in this process, with no network: `Combined.filter` runs over K backends whose exchange answers
at once with bytes built beforehand (each echoes every node, as the reference extender does:
full-object backends a NodeList of the request's full Node objects, names-only backends
NodeNames), so the figure is the proxy's reading of the request, its reading of each reply and
its answer, and nothing of the backends'.

For each N it runs 0 (names only: the fixed cost), 1 and K full-object backends, and K
names-only ones, and prints the CPU time per call (time.process_time, median of REPEATS
batches) and the cost per backend (slope between 1 and K). Pin it for steadier figures:

    taskset -c 1 .venv/bin/python bench/combined_cpu.py            # N=5000 and 1000, K=4
    CPU_SIZES=1000 CPU_K=8 CPU_CALLS=10 taskset -c 1 .venv/bin/python bench/combined_cpu.py
    CPU_PROFILE=1 ...   # also a cProfile of the full-object cell at the first N, top 25
"""
from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")

import django  # noqa: E402

django.setup()

from run import build_bodies  # noqa: E402

from extproxy.backends import Exchange  # noqa: E402
from extproxy.backends.base import Backend, now  # noqa: E402
from extproxy.combined import Combined  # noqa: E402
from extproxy.config import parse_config  # noqa: E402

SIZES = [int(s) for s in os.environ.get("CPU_SIZES", "5000,1000").split(",")]
K = int(os.environ.get("CPU_K", "4"))
CALLS = int(os.environ.get("CPU_CALLS", "6"))  # calls per batch
REPEATS = int(os.environ.get("CPU_REPEATS", "5"))  # batches; the median is reported
PROFILE = os.environ.get("CPU_PROFILE", "0") == "1"


class Canned(Backend):
    """A backend that answers every call at once with the same bytes."""

    def __init__(self, config, reply: bytes) -> None:
        super().__init__(config)
        self.reply = reply

    async def exchange(self, verb, verb_string, body, *, stream=False, timeout=None) -> Exchange:
        t = now()
        return Exchange(t, t, 200, self.reply)


def replies(full_body: bytes) -> tuple[bytes, bytes]:
    """(full-object reply, names reply) echoing every node of the request."""
    req = msgspec.json.decode(full_body)
    names = [n["metadata"]["name"] for n in req["Nodes"]["items"]]
    full = msgspec.json.encode({"Nodes": req["Nodes"], "NodeNames": None, "FailedNodes": {}, "Error": ""})
    return full, msgspec.json.encode({"Nodes": None, "NodeNames": names, "FailedNodes": {}, "Error": ""})


def combined(full: int, names: int, full_reply: bytes, names_reply: bytes) -> Combined:
    specs = [(f"full-{i}", False) for i in range(full)] + [(f"names-{i}", True) for i in range(names)]
    data = {"backends": [
        {"name": n, "urlPrefix": f"http://127.0.0.1:1/{n}", "filterVerb": "filter", "httpTimeout": "5s",
         "nodeCacheCapable": cap} for n, cap in specs]}
    configs = parse_config(data, "combined_cpu").backends
    return Combined({c.name: Canned(c, names_reply if c.node_cache_capable else full_reply) for c in configs})


def per_call(proxy: Combined, body: bytes, loop: asyncio.AbstractEventLoop) -> float:
    """Median CPU seconds per call over REPEATS batches (one warm-up call first)."""
    reply, _ = loop.run_until_complete(proxy.filter(body))
    if reply.status != 200 or b'"Error":""' not in reply.body:
        raise RuntimeError(f"combined filter failed: {reply.status} {reply.body[-300:]!r}")
    batches = []
    for _ in range(REPEATS):
        t0 = time.process_time()
        for _ in range(CALLS):
            loop.run_until_complete(proxy.filter(body))
        batches.append((time.process_time() - t0) / CALLS)
    return statistics.median(batches)


def main() -> int:
    loop = asyncio.new_event_loop()
    bodies = build_bodies(SIZES)
    print(f"CPU per combined filter call (median of {REPEATS} batches of {CALLS}), K={K}")
    print(f"{'N':>5s} {'MB':>5s} | {'names x' + str(K):>10s} {'full x1':>9s} {'full x' + str(K):>9s} | "
          f"{'per full backend':>16s} {'per names backend':>17s}")
    for n in SIZES:
        body = bodies[("full", n)]
        full_reply, names_reply = replies(body)
        t_names = per_call(combined(0, K, full_reply, names_reply), body, loop)
        t_full1 = per_call(combined(1, 0, full_reply, names_reply), body, loop)
        t_fullk = per_call(combined(K, 0, full_reply, names_reply), body, loop)
        t_names1 = per_call(combined(0, 1, full_reply, names_reply), body, loop)
        slope_full = (t_fullk - t_full1) / (K - 1)
        slope_names = (t_names - t_names1) / (K - 1)
        print(f"{n:5d} {len(body) / 1e6:5.1f} | {t_names * 1e3:8.1f}ms {t_full1 * 1e3:7.1f}ms {t_fullk * 1e3:7.1f}ms | "
              f"{slope_full * 1e3:14.1f}ms {slope_names * 1e3:15.2f}ms", flush=True)
    if PROFILE:
        body = bodies[("full", SIZES[0])]
        proxy = combined(K, 0, *replies(body))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(CALLS):
            loop.run_until_complete(proxy.filter(body))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
