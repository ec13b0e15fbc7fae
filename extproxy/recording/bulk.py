"""Many rows of one model into the database at once, by the fastest path each database has.

Owns `insert_rows`: SQLite gets one executemany; PostgreSQL gets COPY (psycopg 3) into a
temporary table and one INSERT ... SELECT from it, because a per-row INSERT costs a round trip
each (executemany through psycopg's pipeline was most of the PostgreSQL writer's time). With a
`conflict` column, rows whose value is already stored are skipped by the database (ON CONFLICT
DO NOTHING, on both), so a batch drained twice stores nothing twice. Runs inside the caller's
transaction; decides nothing about what is stored, except that every text is one the database
can take (`storable_text`).
"""
from __future__ import annotations

from typing import Any

CHUNK = 500  # keys per lookup query


def storable_text(value: str) -> str:
    """`value` as any database takes it: NUL as U+FFFD, a lone surrogate as "?". A Pod's name,
    a backend's Error, a Node's name can hold either (JSON allows `\\u0000` and `\\ud800`);
    PostgreSQL refuses NUL in text and Unicode that is not UTF-8, and one such value made the
    whole batch fail again on every retry while the spool filled behind it. The call's bodies,
    stored as bytes, keep what was sent."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def storable(value: Any) -> Any:
    """Every string of a decoded JSON value made storable (a call's findings: a few short items)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable_text(str(key)): storable(item) for key, item in value.items()}
    return value


def as_stored(summary: dict[str, Any]) -> dict[str, Any]:
    """A call's live summary (models.call_to_json) with its texts as `insert_rows` stored them:
    the live feed links a pod by the name it shows, which must be the name the database has."""
    pod = summary["pod"]
    for key in ("namespace", "name", "uid"):
        pod[key] = storable_text(pod[key])
    summary["error"] = storable_text(summary["error"])
    if summary["findings"]:
        summary["findings"] = storable(summary["findings"])
    return summary


def live_summary(call, parts: list) -> dict[str, Any]:
    """What the live feed is sent of a stored call: its summary, and for a combined call the
    backends that took part, so that a feed filtered by one of them keeps the calls it took part
    in (as the feed's history query does), and their parts' errors, so that a feed filtered by
    error text keeps the calls an ignorable backend failed in (the answer's own error is empty)."""
    summary = as_stored(call.to_json())
    if parts:
        summary["part_backends"] = [part.backend for part in parts]
        summary["part_errors"] = [storable_text(part.error) for part in parts if part.error]
    return summary


def make_storable(obj) -> Any:
    """An unsaved model object with every text and JSON field made storable, for a path that
    saves through the ORM (a replay's call) rather than `insert_rows`."""
    from django.db import models

    for f in obj._meta.concrete_fields:
        if isinstance(f, (models.CharField, models.TextField)) and isinstance(getattr(obj, f.attname), str):
            setattr(obj, f.attname, storable_text(getattr(obj, f.attname)))
        elif isinstance(f, models.JSONField):
            setattr(obj, f.attname, storable(getattr(obj, f.attname)))
    return obj


def insert_rows(model, objects: list, conflict: str | None = None) -> None:
    """INSERT the unsaved `objects`; with `conflict`, set their primary keys afterwards.

    The ORM's bulk_create adapts every value through each field's generic path, which was
    most of the writer's time; the fields stored here are few and plain, so they are adapted
    once per kind.
    """
    from django.db import connection

    if not objects:
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    rows = _adapted_rows(objects, fields, connection)
    q = connection.ops.quote_name
    table = q(model._meta.db_table)
    columns = ", ".join(q(f.column) for f in fields)
    on_conflict = f" ON CONFLICT ({q(conflict)}) DO NOTHING" if conflict else ""
    if connection.vendor == "postgresql":
        _copy_insert(connection, model._meta.db_table, columns, rows, on_conflict)
    else:
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))}){on_conflict}"
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)
    if conflict:
        keys = [getattr(o, conflict) for o in objects]
        ids: dict[str, int] = {}
        for start in range(0, len(keys), CHUNK):
            ids.update(model.objects.filter(**{f"{conflict}__in": keys[start : start + CHUNK]}).values_list(conflict, "pk"))
        for o in objects:
            o.pk = ids.get(getattr(o, conflict))


def _adapted_rows(objects: list, fields: list, connection) -> list[tuple[Any, ...]]:
    from django.db import models

    ops = connection.ops
    adapt = []
    for f in fields:
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            raise ValueError(f"{f}: auto_now fields are filled by the ORM's save path only; use bulk_create")
        if isinstance(f, models.DateTimeField):
            adapt.append(ops.adapt_datetimefield_value)
        elif isinstance(f, models.JSONField):
            adapt.append(lambda v, _f=f: _f.get_db_prep_save(storable(v), connection))
        elif isinstance(f, (models.CharField, models.TextField)):
            adapt.append(storable_text)
        else:
            adapt.append(None)
    names = [f.attname for f in fields]
    return [
        tuple(getattr(o, n) if a is None else a(getattr(o, n)) for n, a in zip(names, adapt))
        for o in objects
    ]


def _copy_insert(connection, table: str, columns: str, rows: list[tuple], on_conflict: str) -> None:
    """COPY into a per-session temporary twin of `table` (emptied at commit), then INSERT ... SELECT."""
    q = connection.ops.quote_name
    load = q(f"load_{table}")
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {load} ON COMMIT DELETE ROWS AS "
                       f"SELECT {columns} FROM {q(table)} WITH NO DATA")
        with cursor.cursor.copy(f"COPY {load} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(f"INSERT INTO {q(table)} ({columns}) SELECT {columns} FROM {load}{on_conflict}")
        cursor.execute(f"TRUNCATE {load}")  # a second insert in the same transaction starts empty
