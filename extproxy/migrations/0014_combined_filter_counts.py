"""A combined filter call's counts (passed, failed, unresolvable) were stored as the sum over its
own answer and every backend's part: a pod that the backends together left without a node was
stored with the nodes each backend had passed, and the pending page, which looks for filters
that passed none, never listed it. The counts are read again from the stored decisions, the
answer's alone (backend "combined"). Only combined filter calls change; read in chunks."""
import json
import zlib

from django.db import migrations

CHUNK = 500
RESULTS = ("passed", "failed", "unresolvable")


def recount(apps, schema_editor):
    Call = apps.get_model("extproxy", "Call")
    db = schema_editor.connection.alias
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
        migrations.RunPython(recount, migrations.RunPython.noop, elidable=True),
    ]
