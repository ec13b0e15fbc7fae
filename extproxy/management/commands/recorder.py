"""`manage.py recorder`: the recorder process. Drains the spool into the database.

Runs beside the serving process (started by `make run`, and as a second container of the
Deployment's pod sharing the spool volume), at a lower OS priority (EXTPROXY_RECORDER_NICE) so
decoding, judging, compressing and writing never take CPU the scheduler's calls need.
SIGTERM/SIGINT: the batch in hand is committed if the database takes it, otherwise it stays
in the spool; the process exits at once. `--until-idle` drains what is there and exits.
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
from extproxy.recording.spool import SpoolBusy
from extproxy.recording.writer import Drainer

log = logging.getLogger("extproxy.recorder")


class Command(BaseCommand):
    help = "Drain the recording spool into the database (the recorder process)."

    def add_arguments(self, parser):
        parser.add_argument("--until-idle", action="store_true", help="exit once the spool is drained")
        parser.add_argument("--nice", type=int, default=None, help="niceness increment (default EXTPROXY_RECORDER_NICE)")
        parser.add_argument("--exit-with-parent", action="store_true", help="drain and exit when the parent process ends")

    def handle(self, *args, **options):
        increment = settings.EXTPROXY_RECORDER_NICE if options["nice"] is None else options["nice"]
        if increment:
            os.nice(increment)
        config = load_config(settings.EXTPROXY_CONFIG or None)
        root = Path(settings.EXTPROXY_SPOOL_DIR)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            drainer = Drainer(root, config.recording, config.redaction, config.retention, recorder_publisher(root), stop)
        except SpoolBusy as exc:
            raise CommandError(str(exc)) from None
        if options["exit_with_parent"]:
            _watch_parent(stop)
        log.info("recorder: draining %s (pid %d, nice %d)", root, os.getpid(), os.nice(0))
        try:
            drainer.run(until_idle=options["until_idle"])
        finally:
            drainer.close()
        log.info("recorder: stopped; %d calls written", drainer.counters.written)


def _watch_parent(stop: threading.Event) -> None:
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(0.5):
            if os.getppid() != parent:
                log.info("recorder: parent %d ended; stopping (what is left stays in the spool)", parent)
                stop.set()

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()
