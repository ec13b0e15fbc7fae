"""Does the live feed keep up at 500 calls/s? A benchmark, not a test (run by `make bench`).

Starts extproxy (production command, fresh SQLite, recording on) in front of the reference
extender, logs a headless Debian chromium into the live feed, then sends filter calls at a
fixed rate through the proxy, each for its own pod: once with the feed by call (`?view=calls`)
and once by attempt (the default view; each call is its own attempt here, and the page asks
the server to tell the newest attempts every second). In the page a MutationObserver notes when
each pod's row appears, and requestAnimationFrame notes the longest gap between frames (how
long the page was unresponsive). Prints per view calls sent, calls seen in the feed,
send-to-shown latency p50/p99, the longest frame gap, and what the page holds at the end (rows,
attempts, ids remembered: bounded). Only 127.0.0.1 is used; the run is bounded.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import HOST, PYTHON, ROOT, UVICORN, free_port, load_fixture, pct, proxy_env, stop, wait_http  # noqa: E402

RATE = int(os.environ.get("FEED_RATE", "500"))  # calls per second
SECONDS = float(os.environ.get("FEED_SECONDS", "10"))
CHROMIUM = os.environ.get("EXTPROXY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

OBSERVER = """
() => {
  window.__seen = {};
  window.__maxGap = 0;
  let last = performance.now();
  const frame = (t) => { window.__maxGap = Math.max(window.__maxGap, t - last); last = t; requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  new MutationObserver((records) => {
    const now = Date.now();
    for (const r of records) for (const n of r.addedNodes) {
      const link = n.querySelector ? n.querySelector("a") : null;
      const m = link ? link.textContent.match(/feed-\\d+$/) : null;
      if (m && !(m[0] in window.__seen)) window.__seen[m[0]] = now;
    }
  }).observe(document.getElementById(window.__extproxyFeed && location.search.includes("view=calls") ? "calls" : "attempts"),
              {childList: true});
}
"""


def body_for(template: dict, i: int) -> bytes:
    args = dict(template)
    args["Pod"] = dict(template["Pod"], metadata=dict(template["Pod"]["metadata"], name=f"feed-{i}", uid=f"uid-feed-{i}"))
    return json.dumps(args).encode()


def report(view: str, sent: dict[str, float], seen: dict[str, float], max_gap: float, held: dict) -> None:
    latencies = [seen[name] - at for name, at in sent.items() if name in seen]
    print(f"\nlive feed by {view}, {RATE} calls/s for {SECONDS:.0f}s: {len(sent)} calls sent, "
          f"{len(latencies)} rows seen in the feed")
    if latencies:
        print(f"send -> row shown: p50 {pct(latencies, 0.5):.0f} ms, p99 {pct(latencies, 0.99):.0f} ms, "
              f"max {max(latencies):.0f} ms")
    print(f"longest gap between frames (page unresponsive): {max_gap:.0f} ms")
    print(f"held by the page at the end: {held['rows']} rows, {held['attempts']} attempts, {held['seen']} call ids")


async def send_load(url: str, template: dict, offset: int = 0) -> dict[str, float]:
    """RATE calls/s for SECONDS, paced every 20 ms; returns pod name -> send time (ms)."""
    sent: dict[str, float] = {}
    total = int(RATE * SECONDS)
    per_tick = max(1, RATE // 50)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        async def one(i: int) -> None:
            sent[f"feed-{i}"] = time.time() * 1000
            async with session.post(url, data=body_for(template, i)) as resp:
                await resp.read()

        tasks = []
        start = time.monotonic()
        for tick in range(0, total, per_tick):
            tasks += [asyncio.create_task(one(offset + i)) for i in range(tick, min(total, tick + per_tick))]
            await asyncio.sleep(max(0.0, start + (tick + per_tick) / RATE - time.monotonic()))
        await asyncio.gather(*tasks)
    return sent


def reference_backend() -> tuple[subprocess.Popen, int]:
    port = free_port()
    ref = subprocess.Popen([PYTHON, str(ROOT / "bench" / "refbackend.py"), "--port", str(port)], cwd=ROOT)
    wait_http(f"http://{HOST}:{port}/", ref, "reference backend")
    return ref, port


def main() -> int:
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="extproxy-feed-"))
    ref = proxy = recorder = None
    try:
        ref, ref_port = reference_backend()
        config = tmp / "extproxy.json"
        config.write_text(json.dumps({"backends": [{
            "name": "ref", "urlPrefix": f"http://{HOST}:{ref_port}/ext", "filterVerb": "filter", "nodeCacheCapable": True,
        }]}))
        env = dict(proxy_env(config, tmp), EXTPROXY_ADMIN_PASSWORD="bench")
        for command in (["migrate", "--noinput", "-v", "0"], ["bootstrap"]):
            subprocess.run([PYTHON, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
        port = free_port()
        proxy = subprocess.Popen([UVICORN, "extproxy.asgi:application", "--host", HOST, "--port", str(port),
                                  "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on"],
                                 cwd=ROOT, env=env)
        recorder = subprocess.Popen([PYTHON, "manage.py", "recorder"], cwd=ROOT, env=env)  # as `make run` does
        base = f"http://{HOST}:{port}"
        wait_http(f"{base}/healthz", proxy, "extproxy")
        template = load_fixture("filter-request.nodecache-true.json")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page()
            page.goto(f"{base}/accounts/login/?next=/")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", "bench")
            page.click("button[type=submit]")
            page.wait_for_selector("#conn[data-state=live]", timeout=15000)
            offset = 0
            for view in ("calls", "attempts"):
                page.goto(f"{base}/?view={view}")
                page.wait_for_selector("#conn[data-state=live]", timeout=15000)
                page.wait_for_timeout(500)  # the first reset's snapshot
                page.evaluate(OBSERVER)
                result: dict = {}
                loader = threading.Thread(target=lambda: result.update(
                    sent=asyncio.run(send_load(f"{base}/extender/ref/filter", template, offset))))
                loader.start()
                while loader.is_alive():
                    page.wait_for_timeout(200)  # keep the page's event loop turning
                page.wait_for_timeout(3000)  # let the last batches arrive
                seen = page.evaluate("window.__seen")
                max_gap = page.evaluate("window.__maxGap")
                held = page.evaluate("({rows: document.querySelectorAll('#calls tr, #attempts tr').length,"
                                     " attempts: window.__extproxyFeed.attempts.size, seen: window.__extproxyFeed.seen.size})")
                offset += len(result["sent"])
                report(view, result["sent"], seen, max_gap, held)
            browser.close()
        return 0
    finally:
        stop(proxy, "extproxy")
        stop(recorder, "recorder")
        stop(ref, "reference backend")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
