"""`manage.py recorder`: the recorder process. Drains the spool into the database.

Runs beside the serving process (started by `make run`, and as a second container of the
Deployment's pod sharing the spool volume), at a lower OS priority so decoding, judging,
compressing and writing never take CPU the scheduler's calls need: SCHED_IDLE by default
(EXTPROXY_RECORDER_SCHED_IDLE; it runs only when the core has nothing else to run, where a
niced process still gets time slices that delay the serving process's wake-ups), and the
niceness increment EXTPROXY_RECORDER_NICE (what counts when SCHED_IDLE is off or refused).
SIGTERM/SIGINT: it keeps draining until the spool is empty or `--stop-drain-seconds` (default
20, inside Kubernetes' 30 s grace period) have passed, then exits; a second signal ends it at
once. A batch the database did not take stays in the spool either way (drained on the next
start, stored once by call_id); a database wait still in progress when the window ends (a
database that does not answer) is given up then, not at EXTPROXY_DB_STATEMENT_DEADLINE
(recording/deadline.py: the watchdog wakes on the stop event). `--until-idle` drains what is there and exits.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from dashboard import rollup
from extproxy.background import lower_priority, watch_parent
from extproxy.heap import manage_heap
from extproxy.management.background_command import BackgroundCommand
from extproxy.config import load_config
from extproxy.recording.abandoned import Reclaimer
from extproxy.recording.live import recorder_publisher
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.spool_reader import SpoolBusy
from extproxy.recording.writer import Drainer
from extproxy.spool_reports import SpoolReporter

log = logging.getLogger("extproxy.recorder")


class Command(BackgroundCommand):
    help = "Drain the recording spool into the database (the recorder process)."

    def add_arguments(self, parser):
        parser.add_argument("--until-idle", action="store_true", help="exit once the spool is drained")
        parser.add_argument("--nice", type=int, default=None, help="niceness increment (default EXTPROXY_RECORDER_NICE)")
        parser.add_argument("--sched-idle", action=argparse.BooleanOptionalAction, default=None,
                            help="run under SCHED_IDLE (default EXTPROXY_RECORDER_SCHED_IDLE)")
        parser.add_argument("--exit-with-parent", action="store_true", help="drain and exit when the parent process ends")
        parser.add_argument("--stop-drain-seconds", type=float, default=20.0,
                            help="after SIGTERM, keep draining this long at most while the spool has records")

    def handle(self, *args, **options):
        # Before any thread starts: threads inherit the policy of the thread that creates them.
        increment = settings.EXTPROXY_RECORDER_NICE if options["nice"] is None else options["nice"]
        idle = settings.EXTPROXY_RECORDER_SCHED_IDLE if options["sched_idle"] is None else options["sched_idle"]
        priority = lower_priority("recorder", increment, idle)
        # megabyte bodies decoded and compressed; a batch's peak handed back once it has passed
        manage_heap(settings.EXTPROXY_HEAP_KEEP_BYTES, settings.EXTPROXY_HEAP_TRIM_SECONDS).start()
        config = load_config(settings.EXTPROXY_CONFIG or None)
        root = Path(settings.EXTPROXY_SPOOL_DIR)
        stop = threading.Event()
        try:
            drainer = Drainer(root, config.recording, config.redaction, config.retention, recorder_publisher(root), stop)
        except SpoolBusy as exc:
            raise CommandError(str(exc)) from None
        drainer.reporter = SpoolReporter(root, settings.EXTPROXY_DB_STATEMENT_DEADLINE, stop)
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
            watch_parent("recorder", finish, stop)
        # The dashboard's latency roll-up reads what this process writes: it runs here, at this
        # process's priority, rather than as a thread of the serving process beside the hot path.
        rollup.start()
        # What a killed serving process left in a spool directory no serving process claims again.
        Reclaimer(SpoolSettings.from_django(), stop, settings.EXTPROXY_SPOOL_ABANDONED_SECONDS).start()
        log.info("recorder: draining %s (pid %d, %s)", root, os.getpid(), priority)  # every thread started
        try:
            drainer.until_idle = options["until_idle"]
            drainer.run()
        finally:
            rollup.stop()
            drainer.reporter.final()  # ended, when the spool is empty and no serving process is left
            drainer.close()
        log.info("recorder: stopped; %d calls written", drainer.counters.written)
