"""`manage.py shadow`: the shadow process. Sends each recorded call of a backend to its shadows.

Runs beside the serving process and the recorder (started by `make run`, and as a container of
the Deployment's pod sharing the spool volume), at the lowest OS priority: niceness +10
(EXTPROXY_SHADOW_NICE) and SCHED_IDLE where the kernel has it, so it gets CPU only when nothing
else wants it (the scheduler's calls, the recorder). With no shadow backend configured it idles
(a container that exits would be restarted over and over). SIGTERM/SIGINT: it stops reading,
waits for the shadow calls in flight (each bounded by its shadow's httpTimeout), saves and
exits; a second signal ends it at once. See extproxy/shadow.py for what it does.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from pathlib import Path

from django.conf import settings

from extproxy import shadow as shadows_module
from extproxy.background import lower_priority, watch_parent
from extproxy.heap import manage_heap
from extproxy.management.background_command import BackgroundCommand
from extproxy.config import RedactionConfig, load_config
from extproxy.policies import default_policy, parse_policy
from extproxy.shadowstats import load_state, save_state

log = logging.getLogger("extproxy.shadow")


class Command(BackgroundCommand):
    help = "Send each recorded call of a backend to its shadow backends and diff the decisions (the shadow process)."

    def add_arguments(self, parser):
        parser.add_argument("--nice", type=int, default=None, help="niceness increment (default EXTPROXY_SHADOW_NICE)")
        parser.add_argument("--no-idle-class", action="store_true", help="do not ask for SCHED_IDLE")
        parser.add_argument("--concurrency", type=int, default=shadows_module.CONCURRENCY,
                            help="shadow calls in flight at once (default %(default)s)")
        parser.add_argument("--max-lag", type=float, default=shadows_module.MAX_LAG,
                            help="seconds: a call older than this when its turn comes is dropped as stale "
                                 "(default %(default)s)")
        parser.add_argument("--until-idle", action="store_true", help="exit once everything in the spool is mirrored")
        parser.add_argument("--exit-with-parent", action="store_true", help="exit when the parent process ends")

    def handle(self, *args, **options):
        increment = getattr(settings, "EXTPROXY_SHADOW_NICE", 10) if options["nice"] is None else options["nice"]
        priority = lower_priority("shadow", increment, not options["no_idle_class"])
        # megabyte bodies decoded and compressed; a batch's peak handed back once it has passed
        manage_heap(settings.EXTPROXY_HEAP_KEEP_BYTES, settings.EXTPROXY_HEAP_TRIM_SECONDS).start()
        config = load_config(settings.EXTPROXY_CONFIG or None)
        root = Path(settings.EXTPROXY_SPOOL_DIR)
        root.mkdir(parents=True, exist_ok=True)
        stop = threading.Event()

        def finish(*_):
            if stop.is_set():
                os._exit(1)  # the second signal: now
            log.info("shadow: stopping")
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, finish)
        if options["exit_with_parent"]:
            watch_parent("shadow", finish, stop)
        if not config.shadows:
            # Positions kept while nothing was followed would make a later start count the
            # whole time in between as skipped: forget them, start afresh when shadows come.
            state = load_state(root)
            if state.positions:
                state.positions = {}
                save_state(root, state)
            log.info("shadow: no shadow backend configured; idle (pid %d)", os.getpid())
            if not options["until_idle"]:
                stop.wait()
            return
        if config.kind == "default":
            policies = {name: default_policy() for name in config.policies}
        else:
            policies = {name: parse_policy(name, data) for name, data in config.policies.items()}
        shadows = shadows_module.configured_shadows(config, policies)
        log.info("shadow: following %s for %s (pid %d, %s)", root,
                 ", ".join(f"{s.name} (shadow of {p})" for p, ss in shadows.items() for s in ss), os.getpid(), priority)
        asyncio.run(_run(root, shadows, options, stop, config.redaction))
        log.info("shadow: stopped")


async def _run(root: Path, shadows, options, stop: threading.Event, redaction: RedactionConfig) -> None:
    shadower = shadows_module.Shadower(root, shadows, concurrency=options["concurrency"], max_lag=options["max_lag"],
                                       redaction=redaction, stop=stop)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopped.set)), daemon=True).start()
    try:
        await shadower.run(stopped, until_idle=options["until_idle"])
    finally:
        await shadower.close()
