"""What a combined call stored of itself is its answer's alone, as the recorder now stores it.

A combined filter call's counts (passed, failed, unresolvable) were stored as the sum over its
own answer and every backend's part: a pod that the backends together left without a node was
stored with the nodes each backend had passed, and the pending page, which looks for filters
that passed none, never listed it. The counts are read again from the stored decisions, the
answer's alone (backend "combined").

A combined prioritize call's answer (Σ score × weight) is out of 0..10 by design, and was
stored with a `score-out-of-range` finding per node; those findings are dropped (a backend's
own stay on its part). Only combined filter and prioritize calls change; read in chunks."""
import json
import zlib

from django.db import migrations

CHUNK = 500
RESULTS = ("passed", "failed", "unresolvable")


def forward(apps, schema_editor):
    Call = apps.get_model("extproxy", "Call")
    db = schema_editor.connection.alias
    recount(Call, db)
    drop_own_range_findings(Call, db)


def drop_own_range_findings(Call, db):
    calls = Call.objects.using(db).filter(form="combined", verb="prioritize").order_by("id")
    last = 0
    while True:
        chunk = list(calls.filter(id__gt=last).only("id", "findings")[:CHUNK])
        if not chunk:
            return
        last = chunk[-1].id
        changed = []
        for call in chunk:
            findings = call.findings if isinstance(call.findings, list) else []
            kept = [f for f in findings if not (isinstance(f, dict) and f.get("kind") == "score-out-of-range")]
            if len(kept) != len(findings):
                call.findings = kept
                changed.append(call)
        Call.objects.using(db).bulk_update(changed, ["findings"])


def recount(Call, db):
    calls = Call.objects.using(db).filter(form="combined", verb="filter").order_by("id")
    last = 0
    while True:
        chunk = list(calls.filter(id__gt=last).only("id", "decisions_blob", "passed_count", "failed_count",
                                                     "unresolvable_count")[:CHUNK])
        if not chunk:
            return
        last = chunk[-1].id
        changed = []
        for call in chunk:
            counts = dict.fromkeys(RESULTS, 0)
            blob = bytes(call.decisions_blob or b"")
            for decision in json.loads(zlib.decompress(blob)) if blob else []:
                if decision.get("backend") == "combined" and decision.get("result") in counts:
                    counts[decision["result"]] += 1
            now = (counts["passed"], counts["failed"], counts["unresolvable"])
            if now != (call.passed_count, call.failed_count, call.unresolvable_count):
                call.passed_count, call.failed_count, call.unresolvable_count = now
                changed.append(call)
        Call.objects.using(db).bulk_update(changed, ["passed_count", "failed_count", "unresolvable_count"])


class Migration(migrations.Migration):

    dependencies = [
        ("extproxy", "0013_part_backend_call"),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop, elidable=True),
    ]
