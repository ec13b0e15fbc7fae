"""manage.py replay lists at most 20 changed calls (and 20 in error) under its table: past that
it must say how many it left out. It printed the first 20 and nothing more, so 61 changed calls
read as a list of 20. Real backend on loopback, real database."""
from __future__ import annotations

import re

from extproxy.models import Call
from tests.test_combined import failing
from tests.test_replay import gpu_with_filters
from tests.test_replay_command import replay

CALLS = 23


def test_the_table_says_how_many_changed_calls_and_calls_in_error_it_does_not_list(backend_server, proxy, write_config):
    backend, path, _ = gpu_with_filters(backend_server, proxy, write_config, CALLS)

    backend.httpd.behaviours["filter"] = failing({"gpu-node-1": "maintenance"})
    code, out, err = replay("--config", path, "--verb", "filter", "--rate", "0")
    assert code == 1, out + err
    assert re.search(r"^changed +23$", out, re.M)
    assert len(re.findall(r"^changed: call ", out, re.M)) == 20
    assert "... and 3 more changed calls, not listed" in out


    Call.objects.filter(is_replay=False).update(backend="retired")  # each call now an error: no such backend
    code, out, err = replay("--config", path, "--verb", "filter", "--rate", "0")
    assert code == 2 and re.search(r"^errors +23$", out, re.M), out + err
    assert len(re.findall(r"^error: call ", out, re.M)) == 20
    assert "... and 3 more calls in error, not listed" in out
