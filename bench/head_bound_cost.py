"""What the main port's bound on request heads (extproxy/header_bound.py) costs a scheduler call.

The bound wraps uvicorn's httptools protocol: each read adds its bytes to the head's count, and
each request starts and cancels a timer for its head. On the embedded defaults (no
EXTPROXY_EXTENDER_PORT) the scheduler's calls arrive on the main port, so this is on their path.
Two extproxy processes serve the same calls side by side, round by round: one as `make run`
starts it, one with the bound left out (its `install` replaced before the application is
imported; a benchmark-only change, not a setting). Names mode, N=1000, one caller, recording
off, pinned as `make bench` pins (this client and both extproxy processes on one core, the
reference backend on the other). Reported: client-seen latency p50/p99 and the extproxy
process's CPU time per call, and the difference.

    .venv/bin/python bench/head_bound_cost.py        # BENCH_SCALE=0.3 for a quicker look
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hop_costs import Procs, alternate, line, reference_config, start_extproxy, start_reference  # noqa: E402
from run import BACKEND_CORE, HOST, PIN, PROXY_CORE, PYTHON, ROOT, build_bodies, free_port, pct, stop  # noqa: E402

# uvicorn's own entry point, with header_bound.install replaced before asgi.py imports it.
WITHOUT_BOUND = ("import sys, extproxy.header_bound as bound; bound.install = lambda *a, **k: False; "
                 "from uvicorn.main import main; sys.argv[0] = 'uvicorn'; main()")


def without_bound(cmd: list[str]) -> list[str]:
    """The same command, its uvicorn executable replaced by uvicorn's entry point run as above."""
    at = next(i for i, part in enumerate(cmd) if part.endswith("/uvicorn"))
    return [*cmd[:at], PYTHON, "-c", WITHOUT_BOUND, *cmd[at + 1:]]


async def compare(sides: dict[str, tuple[str, int]], body: bytes) -> None:
    results = await alternate(sides, body)
    print("main port, names N=1000, c=1, recording off; CPU of the extproxy process")
    for name, (lat, user, system) in results.items():
        print(line(name, lat, (user + system) / len(lat)))
    (on, *cpu_on), (off, *cpu_off) = results["with the head bound"], results["without it"]
    print(f"  difference: p50 {(pct(on, 0.5) - pct(off, 0.5)) * 1e6:+.0f} us, "
          f"CPU {(sum(cpu_on) / len(on) - sum(cpu_off) / len(off)) * 1e6:+.0f} us/call "
          f"(p50 ratio {pct(on, 0.5) / pct(off, 0.5):.3f})")


def main() -> int:
    import uvloop

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-head-"))
    ref = None
    procs: Procs = []
    try:
        body = build_bodies([1000])[("names", 1000)]
        if PIN:
            os.sched_setaffinity(0, {PROXY_CORE})
        ref_port = free_port()
        ref = start_reference(ref_port)
        config = reference_config(tmp, ref_port, node_cache_capable=True, recording=False)
        bounded, bounded_port = start_extproxy(ROOT, config, tmp / "bounded", 0, name="extproxy")
        procs += bounded
        unbounded, unbounded_port = start_extproxy(ROOT, config, tmp / "unbounded", 0, wrap=without_bound,
                                                   name="extproxy without the head bound")
        procs += unbounded
        print(f"head bound cost; {'pinned: client+extproxy core %d, backend core %d' % (PROXY_CORE, BACKEND_CORE) if PIN else 'not pinned'}; "
              f"load average {os.getloadavg()[0]:.2f}")
        path = "/extender/ref/filter"
        uvloop.run(compare({"with the head bound": (f"http://{HOST}:{bounded_port}{path}", bounded[0][0].pid),
                            "without it": (f"http://{HOST}:{unbounded_port}{path}", unbounded[0][0].pid)}, body))
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return 0
    finally:
        for proc, what in reversed(procs):
            stop(proc, what)
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
