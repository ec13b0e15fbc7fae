"""manage.py replay: re-run recorded calls against a target and report the decision diff.

A regression gate for an extender's CI. Calls come from the database (selectors as in the
API: --call, --pod, --since, --until, --backend, --verb, --outcome, --namespace) or from a
fixture set (--fixtures FILE: JSON Lines, or one JSON fixture, as /api/fixtures/ and
/api/calls/<id>/fixture give them). The target is the configuration (--config, else
EXTPROXY_CONFIG), or it with one backend replaced by --url (with its verbs, mode and weight)
or by a policy (--policy NAME, --rules FILE).

Progress goes to stderr, the summary table (or --json) to stdout. Exit status: 0 nothing
changed, 1 decisions changed, 2 a call could not be replayed, no call was replayed (a gate
that compared nothing has not passed), a --call names no recorded call (pruned or mistyped; a
gate must not pass on fewer calls than it named: --allow-missing replays the others, and the
summary names the missing ones) or the arguments are wrong.
"""
from __future__ import annotations

import getpass
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from django.core.management.base import BaseCommand, CommandError

from extproxy.audit import Action, audit
from extproxy.replay.diff import redaction_note
from extproxy.replay.paging import as_it_stands
from extproxy.replay.runner import Original, Replayer, Result, missing_calls, missing_words, run_replay, select_calls
from extproxy.replay.targets import TargetError, check, load_rules, standing_in_for_selected
from extproxy.replay.worker import beating

SHOW_CHANGED = 20


class Summary:
    def __init__(self) -> None:
        self.total = self.replayed = self.changed = self.errors = self.skipped = self.redacted = 0
        self.counts: Counter = Counter()
        self.changed_calls: list[dict[str, Any]] = []
        self.error_calls: list[dict[str, Any]] = []
        self.missing: list[int] = []  # --call ids that name no recorded call (--allow-missing)

    def add(self, result: Result) -> None:
        self.total += 1
        call = result.original.call_id
        if result.status == "skipped":
            self.skipped += 1
        elif result.status == "error":
            self.errors += 1
            if len(self.error_calls) < SHOW_CHANGED:
                self.error_calls.append({"call": call, "error": result.error})
        else:
            self.replayed += 1
            self.redacted += bool(result.original.marks)
            if result.diff is not None and result.diff.changed:
                self.changed += 1
                self.counts.update(result.diff.kinds.keys())
                if len(self.changed_calls) < SHOW_CHANGED:
                    self.changed_calls.append({"call": call, "verb": result.original.verb, "backend": result.original.backend,
                                               "kinds": dict(result.diff.kinds), "winner": result.diff.winner,
                                               "error": result.diff.error, "parts": _parts(result),
                                               "note": redaction_note(result.original.marks)})

    @property
    def status(self) -> int:
        # No call replayed (none selected, a pruned call, an empty fixture file, only binds
        # skipped): the gate compared nothing, which is not "nothing changed".
        return 2 if self.errors or not self.replayed else 1 if self.changed else 0

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "replayed": self.replayed, "changed": self.changed, "errors": self.errors,
                "skipped": self.skipped, "redacted": self.redacted, "counts": dict(sorted(self.counts.items())),
                "changed_calls": self.changed_calls, "error_calls": self.error_calls, "exit_status": self.status,
                "missing": len(self.missing), "missing_calls": self.missing[:SHOW_CHANGED]}


def _parts(result: Result) -> list[dict] | None:
    """The combined call's parts that changed; None (not compared, as the API says of a diff
    stored before parts were) when the recorded call's parts are not known: a fixture without
    them. An empty list would say that no backend's part changed, which nobody checked."""
    if result.original.form == "combined" and result.original.parts is None:
        return None
    return result.diff.parts if result.diff is not None else []


def read_fixtures(path: str) -> Iterator[dict[str, Any]]:
    """Fixtures from a JSON Lines file (one per line) or a file holding one fixture, read lazily."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
        rest = handle.read(1)
        handle.seek(0)
        if rest and not first.strip().endswith("}"):  # one indented JSON document
            try:
                document = json.load(handle)
            except ValueError as exc:  # not "decisions changed" (exit 1) with a traceback
                raise CommandError(f"{path}: not a fixture: {exc}", returncode=2) from None
            yield document
            return
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise CommandError(f"{path}:{number}: not a fixture: {exc}", returncode=2) from None



def _os_user() -> str:
    """Who ran the command, for the audit trail (the CLI has no Django user)."""
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without /etc/passwd entry): still audited
        return "cli"

class Command(BaseCommand):
    help = "Replay recorded calls (database or fixtures) against a target; exit 0 same, 1 changed, 2 errors."

    def add_arguments(self, parser) -> None:
        source = parser.add_argument_group("which calls")
        source.add_argument("--call", type=int, action="append", help="a call id (repeatable)")
        source.add_argument("--pod", help="namespace/name")
        for name in ("since", "until", "backend", "verb", "outcome", "namespace"):
            source.add_argument(f"--{name}")
        source.add_argument("--fixtures", help="a fixture set (JSON Lines) instead of the database")
        target = parser.add_argument_group("against what")
        target.add_argument("--config", help="the configuration file (default: EXTPROXY_CONFIG)")
        target.add_argument("--url", help="another extender's urlPrefix, standing in for the call's backend")
        target.add_argument("--policy", help="a configured policy, standing in for the call's backend")
        target.add_argument("--rules", help="a policy file (YAML or JSON) standing in for the call's backend")
        target.add_argument("--replaces", help="the backend the target stands in for, in combined calls")
        for verb in ("filter", "prioritize", "preempt", "bind"):
            target.add_argument(f"--{verb}-verb")
        target.add_argument("--node-cache-capable", choices=("true", "false"))
        target.add_argument("--weight", type=int)
        target.add_argument("--http-timeout", help="a Go duration, e.g. 5s")
        parser.add_argument("--allow-bind", action="store_true", help="replay binds too (they bind pods)")
        parser.add_argument("--allow-missing", action="store_true",
                            help="replay the --call ids that exist when some name no recorded call (else exit 2)")
        parser.add_argument("--rate", type=float, default=0.0, help="calls per second at most (0: no limit)")
        parser.add_argument("--no-record", action="store_true", help="do not store the replays (database source)")
        parser.add_argument("--json", action="store_true", help="the summary as JSON")

    def handle(self, *args, **options) -> None:
        from extproxy.config import ConfigError, load_config
        from extproxy.engine import get_engine

        try:
            config = load_config(options["config"]) if options["config"] else get_engine().config
        except ConfigError as exc:
            raise CommandError(str(exc), returncode=2) from None
        try:
            target = check(self.target(options), config.policies)
        except TargetError as exc:
            raise CommandError(str(exc), returncode=2) from None
        summary = Summary()
        if options["fixtures"]:
            self.from_fixtures(options, target, config, summary)
        else:
            self.from_database(options, target, config, summary)
        self.report(summary, options["json"])
        if not summary.replayed:
            self.stderr.write("no call was replayed: nothing was compared")
        sys.stdout.flush()
        if summary.status:
            sys.exit(summary.status)

    def target(self, options) -> dict[str, Any]:
        chosen = [k for k in ("url", "policy", "rules") if options[k]]
        if len(chosen) > 1:
            raise CommandError("give at most one of --url, --policy, --rules", returncode=2)
        target: dict[str, Any] = {"kind": "configured"}
        if options["url"]:
            target = {"kind": "url", "url": options["url"]}
        elif options["policy"]:
            target = {"kind": "policy", "policy": options["policy"]}
        elif options["rules"]:
            try:  # the dashboard's loader: aliases refused (a small file could expand to gigabytes)
                target = {"kind": "policy", "rules": load_rules(Path(options["rules"]).read_text())}
            except (OSError, TargetError) as exc:
                raise CommandError(f"--rules: {exc}", returncode=2) from None
        fields = {"filter_verb": "filterVerb", "prioritize_verb": "prioritizeVerb", "preempt_verb": "preemptVerb",
                  "bind_verb": "bindVerb", "weight": "weight", "http_timeout": "httpTimeout", "replaces": "replaces"}
        target.update({key: options[opt] for opt, key in fields.items() if options[opt] is not None})
        if options["node_cache_capable"]:
            target["nodeCacheCapable"] = options["node_cache_capable"] == "true"
        return target

    def selector(self, options) -> dict[str, Any]:
        if options["call"]:
            return {"calls": options["call"]}
        filters = {k: options[k] for k in ("pod", "since", "until", "backend", "verb", "outcome", "namespace") if options[k]}
        return {"filters": filters}

    def from_database(self, options, target, config, summary: Summary) -> None:
        from rest_framework.exceptions import ValidationError

        from extproxy.models import ReplayRun

        selector = self.selector(options)
        target = standing_in_for_selected(target, selector, [b.name for b in config.backends])  # --backend X: --replaces X
        if "calls" in selector:
            summary.missing = missing_calls(selector["calls"])
            if summary.missing:
                words = missing_words(summary.missing, len(set(selector["calls"])), SHOW_CHANGED)
                if not options["allow_missing"]:
                    raise CommandError(f"--call: {words}; --allow-missing replays the others", returncode=2)
                self.stderr.write(f"--call: {words}; replaying the others (--allow-missing)")
        try:
            selection = as_it_stands(select_calls(selector))  # the bar's total and the calls: one selection
            total = selection.count()
        except ValidationError as exc:
            raise CommandError(f"bad selector: {exc.detail}", returncode=2) from None
        bar = ProgressBar(total, self.stderr)
        if options["no_record"]:
            replayer = Replayer(target, config, allow_bind=options["allow_bind"])
            try:
                for call in selection.iterator(chunk_size=100):
                    summary.add(replayer.replay(Original.from_call(call)))
                    bar.step(summary)
            finally:
                replayer.close()
        else:
            run = ReplayRun.objects.create(selector=selector, target=target, allow_bind=options["allow_bind"],
                                           rate=options["rate"])
            audit(None, Action.REPLAY, target=f"replay {run.pk}", actor=_os_user(), source="cli",
                  detail={"selector": selector, "target": run.shown_target, "allow_bind": run.allow_bind})

            def on_result(result: Result) -> None:
                summary.add(result)
                bar.step(summary)

            with beating(run.pk):  # the server's watcher takes a run without a heartbeat for a dead one
                run_replay(run, config=config, on_result=on_result)
            if run.status == "failed":
                raise CommandError(f"replay run {run.pk} failed: {run.error or run.cancel_note}", returncode=2)
            self.stderr.write(f"recorded as replay run {run.pk}")
        bar.done()

    def from_fixtures(self, options, target, config, summary: Summary) -> None:
        replayer = Replayer(target, config, allow_bind=options["allow_bind"])
        bar = ProgressBar(0, self.stderr)
        try:
            for data in read_fixtures(options["fixtures"]):
                try:
                    original = Original.from_fixture(data)
                except (KeyError, TypeError, ValueError) as exc:
                    raise CommandError(f"not an extproxy fixture: {exc!r}", returncode=2) from None
                summary.add(replayer.replay(original))
                bar.step(summary)
        except OSError as exc:
            raise CommandError(f"--fixtures: {exc}", returncode=2) from None
        finally:
            replayer.close()
        bar.done()

    def report(self, summary: Summary, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(summary.to_json(), indent=2))
            return
        rows = [("calls", summary.total), ("replayed", summary.replayed), ("changed", summary.changed),
                ("errors", summary.errors), ("skipped (bind)", summary.skipped)]
        if summary.redacted:
            rows.append(("request redacted", summary.redacted))
        if summary.missing:
            rows.append(("missing (not replayed)", len(summary.missing)))
        rows += [(f"  {kind}", count) for kind, count in sorted(summary.counts.items())]
        width = max(len(name) for name, _ in rows)
        self.stdout.write(f"{'':{width}}  calls")
        for name, count in rows:
            self.stdout.write(f"{name:{width}}  {count:>5}")
        for call in summary.changed_calls:
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(call["kinds"].items()))
            self.stdout.write(f"changed: call {call['call']} ({call['verb']} {call['backend']}): {kinds}")
            # Why, under the kinds: a gate's reader has no run page to open.
            if call["error"]:
                self.stdout.write(f"  error: {call['error']['before'][:200]!r} -> {call['error']['after'][:200]!r}")
            if call["parts"] is None:
                self.stdout.write("  backend parts: not compared (the recorded call's are not known)")
            for part in call["parts"] or ():
                self.stdout.write(f"  backend {part['backend']}: {part['before']} -> {part['after']}"
                                  + (f": {part['error_after'][:200]}" if part["error_after"] else ""))
            if call["note"]:
                self.stdout.write(f"  {call['note']}")
        # The lists are bounded: say so, or a reader takes the first SHOW_CHANGED for them all.
        if summary.changed > len(summary.changed_calls):
            self.stdout.write(f"... and {summary.changed - len(summary.changed_calls)} more changed calls, not listed")
        for call in summary.error_calls:
            self.stdout.write(f"error: call {call['call']}: {call['error']}")
        if summary.errors > len(summary.error_calls):
            self.stdout.write(f"... and {summary.errors - len(summary.error_calls)} more calls in error, not listed")


class ProgressBar:
    """One line on stderr, redrawn at most every 1% (or each call when the total is unknown)."""

    def __init__(self, total: int, stream) -> None:
        self.total = total
        self.stream = stream
        self.done_count = 0
        self._last = -1

    def step(self, summary: Summary) -> None:
        self.done_count += 1
        percent = self.done_count * 100 // self.total if self.total else self.done_count
        if percent == self._last:
            return
        self._last = percent
        if self.total:
            filled = self.done_count * 30 // self.total
            line = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done_count}/{self.total}"
        else:
            line = f"{self.done_count} call(s)"
        self.stream.write(f"\r{line} changed {summary.changed} errors {summary.errors}", ending="")
        self.stream.flush()

    def done(self) -> None:
        self.stream.write("")
