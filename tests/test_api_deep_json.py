"""A JSON body nested deeper than Python's decoder recurses is the client's error (400), not the
server's: `[[[[...` to `POST /api/auth/token/`, which needs no login, answered 500 and wrote a
traceback to the log each time; to `POST /api/replays/` too. A real serving process."""
from __future__ import annotations


import requests

from tests.processes import Installation

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 5_000 + b"1" + b"}" * 5_000


def test_json_nested_too_deeply_is_a_400_that_says_so_and_logs_no_traceback(tmp_path, installation_database):
    installation = Installation(tmp_path, CONFIG, installation_database)
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.manage("bootstrap")
        installation.start_serving()
        json_type = {"Content-Type": "application/json"}
        for body in (DEEP_ARRAY, DEEP_OBJECT):
            anonymous = requests.post(installation.url + "/api/auth/token/", data=body, headers=json_type, timeout=60)
            assert anonymous.status_code == 400, anonymous.text[:300]
            assert "nested too deeply" in anonymous.json()["detail"]
        token = requests.post(installation.url + "/api/auth/token/", json={"username": "admin", "password": "s3cret"},
                              timeout=30).json()["token"]
        replay = requests.post(installation.url + "/api/replays/", data=DEEP_OBJECT, timeout=60,
                               headers={**json_type, "Authorization": f"Token {token}"})
        assert replay.status_code == 400, replay.text[:300]
        assert "nested too deeply" in replay.json()["detail"]
        assert installation.serving is not None
        assert "RecursionError" not in installation.serving.output()
    finally:
        installation.close()
