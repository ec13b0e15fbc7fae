"""Full-object calls over links with a real rate, not loopback: what request cut-through is for.

On loopback a 2.9 MB request crosses each hop in well under a millisecond, so holding it until its
last byte before sending it on costs little (bench/relay_floor.py). Between the scheduler, extproxy
and an extender on a cluster network each hop takes its own transfer time (2.9 MB at 1 Gbit/s is
23 ms), and a proxy that stores and forwards the request adds one whole transfer.

This builds three network namespaces (scheduler, proxy, backend) joined by veth pairs, each end
shaped with a token bucket to `--rate` (per direction, as a full-duplex link): scheduler-proxy,
proxy-backend, and scheduler-backend for the direct calls. Then, in alternating batches of one run
(full-object filter, N=1000, one caller): direct, the extender listener of this checkout, and that
of `--also CHECKOUT` when given (e.g. a worktree of an earlier commit). Recording off unless `--recording` (then with each
extproxy's recorder process on the proxy's core, as `make bench` runs it). Pinned as `make bench`
pins (scheduler side and proxies core 0, backend core 1).
Needs root (ip netns, tc); removes its namespaces at the end.

    .venv/bin/python bench/links.py [--rate 1gbit] [--also CHECKOUT] [--recording]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hop_costs import Procs, start_extproxy  # noqa: E402
from relay_floor import ROUNDS, compare, report  # noqa: E402
from run import BACKEND_CORE, PIN, PROXY_CORE, PYTHON, ROOT, build_bodies, pinned, stop  # noqa: E402

SCALE = float(os.environ.get("BENCH_SCALE", "1"))
SCHED, PROXY, BACKEND = "xp-sched", "xp-proxy", "xp-backend"
# (namespace, device, address) of each link's two ends
LINKS = [
    ((SCHED, "xs0", "10.77.1.1"), (PROXY, "xp0", "10.77.1.2")),  # scheduler - proxy
    ((PROXY, "xp1", "10.77.2.1"), (BACKEND, "xb1", "10.77.2.2")),  # proxy - backend
    ((SCHED, "xs2", "10.77.3.1"), (BACKEND, "xb2", "10.77.3.2")),  # scheduler - backend (direct)
]
BACKEND_PORT = 18080


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def in_ns(ns: str, cmd: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def build(rate: str) -> None:
    for ns in (SCHED, PROXY, BACKEND):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    for (ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b) in LINKS:
        sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        for ns, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            # Egress shaping on both ends: each direction of the link carries `rate`.
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
               "burst", "256kb", "latency", "200ms")


def tear_down() -> None:
    for ns in (SCHED, PROXY, BACKEND):
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def start_proxy(checkout: Path, tmp: Path, config: Path, port: int, recording: bool, name: str) -> Procs:
    """extproxy of `checkout` in the proxy's namespace, its listener on the scheduler's link."""
    procs, _ = start_extproxy(checkout, config, tmp / f"data-{port}", port, recording=recording, name=name,
                              wrap=lambda cmd: in_ns(PROXY, cmd), ready=False,  # the client waits for it
                              EXTPROXY_EXTENDER_HOST="10.77.1.2", EXTPROXY_EXTENDER_ALLOW="10.77.0.0/16")
    return procs


async def measure(urls: dict[str, str], body: bytes, per_round: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """relay_floor's comparison, once every side answers (the proxies start in their namespace)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 60
        for url in urls.values():
            while True:
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                        await resp.read()
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"not ready: {url}")
                await asyncio.sleep(0.2)
    return await compare(urls, body, per_round)


def client(args: argparse.Namespace) -> int:
    """The scheduler's side, run inside its namespace."""
    import uvloop

    if PIN:
        os.sched_setaffinity(0, {PROXY_CORE})
    body = build_bodies([args.n])[("full", args.n)]
    urls = {"direct": f"http://10.77.3.2:{BACKEND_PORT}/ext/filter"}
    for i, port in enumerate(args.ports):
        urls["extproxy" if i == 0 else "extproxy also"] = f"http://10.77.1.2:{port}/extender/ref/filter"
    per_round = max(5, int(20 * SCALE))
    results, cpu = uvloop.run(measure(urls, body, per_round))  # no CPU: the proxies are not this process's to see
    print(f"links: full N={args.n} c=1, {len(body) / 1e6:.2f} MB, every link {args.rate} each way; "
          f"{ROUNDS} rounds of {per_round}; recording {'on' if args.recording else 'off'}; load average {os.getloadavg()[0]:.2f}")
    report(results, cpu)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--also", metavar="CHECKOUT")
    parser.add_argument("--recording", action="store_true")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ports", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client(args)

    tear_down()
    tmp = Path(tempfile.mkdtemp(prefix="extproxy-links-"))
    procs: list[tuple[subprocess.Popen, str]] = []
    try:
        build(args.rate)
        backend = subprocess.Popen(in_ns(BACKEND, pinned([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port",
                                                          str(BACKEND_PORT), "--host", "0.0.0.0"], BACKEND_CORE)), cwd=ROOT)
        procs.append((backend, "reference backend"))
        config = tmp / "extproxy.json"
        config.write_text(json.dumps({"backends": [{"name": "ref", "urlPrefix": f"http://10.77.2.2:{BACKEND_PORT}/ext",
                                                    "filterVerb": "filter", "weight": 1, "httpTimeout": "5s",
                                                    "nodeCacheCapable": False}],
                                      "recording": {"enabled": args.recording}}))
        ports = [18100]
        procs += start_proxy(ROOT, tmp, config, 18100, args.recording, "extproxy")
        if args.also:
            ports.append(18200)
            procs += start_proxy(Path(args.also).resolve(), tmp, config, 18200, args.recording, "extproxy (also)")
        cmd = [PYTHON, __file__, "--client", "--rate", args.rate, "--n", str(args.n), "--ports", *map(str, ports)]
        if args.recording:
            cmd.append("--recording")
        return subprocess.run(in_ns(SCHED, cmd), cwd=ROOT).returncode
    finally:
        for proc, what in reversed(procs):
            stop(proc, what)
        tear_down()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    sys.exit(main())
