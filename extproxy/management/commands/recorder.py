"""`manage.py recorder`: the recorder process. Drains the spool into the database.

Runs beside the serving process (started by `make run`, and as a second container of the
Deployment's pod sharing the spool volume), at a lower OS priority (EXTPROXY_RECORDER_NICE) so
decoding, judging, compressing and writing never take CPU the scheduler's calls need.
SIGTERM/SIGINT: it keeps draining until the spool is empty or `--stop-drain-seconds` (default
20, inside Kubernetes' 30 s grace period) have passed, then exits; a second signal ends it at
once. A batch the database did not take stays in the spool either way (drained on the next
start, stored once by call_id). `--until-idle` drains what is there and exits.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from extproxy.config import load_config
from extproxy.recording.live import recorder_publisher
from extproxy.recording.spool_reader import SpoolBusy
from extproxy.recording.writer import Drainer

log = logging.getLogger("extproxy.recorder")


class Command(BaseCommand):
    help = "Drain the recording spool into the database (the recorder process)."

    def add_arguments(self, parser):
        parser.add_argument("--until-idle", action="store_true", help="exit once the spool is drained")
        parser.add_argument("--nice", type=int, default=None, help="niceness increment (default EXTPROXY_RECORDER_NICE)")
        parser.add_argument("--exit-with-parent", action="store_true", help="drain and exit when the parent process ends")
        parser.add_argument("--stop-drain-seconds", type=float, default=20.0,
                            help="after SIGTERM, keep draining this long at most while the spool has records")

    def handle(self, *args, **options):
        increment = settings.EXTPROXY_RECORDER_NICE if options["nice"] is None else options["nice"]
        if increment:
            os.nice(increment)
        config = load_config(settings.EXTPROXY_CONFIG or None)
        root = Path(settings.EXTPROXY_SPOOL_DIR)
        stop = threading.Event()
        try:
            drainer = Drainer(root, config.recording, config.redaction, config.retention, recorder_publisher(root), stop)
        except SpoolBusy as exc:
            raise CommandError(str(exc)) from None
        window = options["stop_drain_seconds"]

        def finish(*_):
            if drainer.until_idle:  # the second signal: now
                stop.set()
                return
            log.info("recorder: stopping; draining what is in the spool for up to %.0fs", window)
            drainer.until_idle = True
            timer = threading.Timer(window, stop.set)
            timer.daemon = True  # must not keep the process alive once the spool is drained
            timer.start()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, finish)
        if options["exit_with_parent"]:
            _watch_parent(finish, stop)
        log.info("recorder: draining %s (pid %d, nice %d)", root, os.getpid(), os.nice(0))
        try:
            drainer.until_idle = options["until_idle"]
            drainer.run()
        finally:
            drainer.close()
        log.info("recorder: stopped; %d calls written", drainer.counters.written)


def _watch_parent(finish, stop: threading.Event) -> None:
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(0.5):
            if os.getppid() != parent:
                log.info("recorder: parent %d ended", parent)
                finish()
                return

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
