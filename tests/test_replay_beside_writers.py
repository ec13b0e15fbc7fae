"""A replay run stores each replayed call while other processes write to the same database (the
recorder, the run's own heartbeat thread, the server's watcher). With SQLite, the default of
`make run`, a read of the selection left open across those stores made the first store after
another connection's commit fail at once ("database is locked"), so `manage.py replay` of more
than a hundred calls stopped part-way with exit 2. Real backend on loopback, real database."""
from __future__ import annotations

import threading

from django.contrib.auth.models import Group
from django.db import connection

from extproxy.models import Call, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import post
from tests.test_replay import PRIORITIZE, gpu_with_filters
from tests.test_replay_command import replay

CALLS = 105  # more than one read chunk of the selection (100)


def writing_elsewhere(handler, body: bytes) -> None:
    """A backend whose every call is accompanied by a commit on another connection, as the
    recorder's writes go on beside a run."""

    def write() -> None:
        try:
            Group.objects.get_or_create(name=f"beside-{threading.get_ident()}-{len(handler.server.received)}")
        finally:
            connection.close()

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()
    pass_all(handler, body)


def test_a_run_of_many_calls_completes_while_another_connection_writes(backend_server, proxy, write_config):
    backend, path, server = gpu_with_filters(backend_server, proxy, write_config, CALLS)
    assert Call.objects.filter(is_replay=False).count() == CALLS
    backend.httpd.behaviours["filter"] = writing_elsewhere

    code, out, err = replay("--config", path, "--verb", "filter", "--rate", "0")

    assert code == 0, out + err
    run = ReplayRun.objects.get()
    assert (run.status, run.done, run.errors) == ("done", CALLS, 0), run.error
    assert Call.objects.filter(is_replay=True).count() == CALLS


def test_calls_recorded_while_a_run_goes_on_are_not_added_to_it(backend_server, proxy, write_config):
    """The run is the selection as it stood when it started (its `total`): a call recorded
    meanwhile, past the page being read, is not replayed in it (with a selection open at the
    end, a run under steady traffic would otherwise never reach its end)."""
    backend, path, server = gpu_with_filters(backend_server, proxy, write_config, CALLS,
                                             {"filter": pass_all, "prioritize": pass_all})
    recorded_meanwhile = []

    def recording_another_call(handler, body: bytes) -> None:
        if not recorded_meanwhile:  # during the first page: a new call reaches the database
            post(server, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
            server.flush()
            recorded_meanwhile.append(Call.objects.filter(verb="prioritize").values_list("pk", flat=True).first())
            connection.close()
        pass_all(handler, body)

    backend.httpd.behaviours["filter"] = recording_another_call

    code, out, err = replay("--config", path, "--rate", "0")

    assert recorded_meanwhile[0] is not None
    run = ReplayRun.objects.get()
    assert (run.status, run.total, run.done) == ("done", CALLS, CALLS), out + err
    assert not Call.objects.filter(is_replay=True, replay_of_id=recorded_meanwhile[0]).exists()
