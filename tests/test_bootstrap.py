"""manage.py bootstrap: the admin user and the read-only backends table in the admin."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from extproxy.models import ConfiguredBackend

pytestmark = pytest.mark.django_db


def bootstrap() -> str:
    out = StringIO()
    call_command("bootstrap", stdout=out)
    return out.getvalue()


def test_it_creates_admin_with_a_random_password_once(monkeypatch):
    monkeypatch.delenv("EXTPROXY_ADMIN_PASSWORD", raising=False)
    first = bootstrap()
    password = first.split("password ")[1].split(" ")[0]
    assert User.objects.get(username="admin").check_password(password)
    assert "password" not in bootstrap()  # printed once, on the first start only


def test_it_sets_the_admin_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("EXTPROXY_ADMIN_PASSWORD", "first")
    bootstrap()
    monkeypatch.setenv("EXTPROXY_ADMIN_PASSWORD", "second")
    bootstrap()
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("second")


def test_it_mirrors_the_configured_backends_read_only_in_the_admin(tmp_path, settings, client, monkeypatch):
    monkeypatch.setenv("EXTPROXY_ADMIN_PASSWORD", "pw")
    path = tmp_path / "kube-scheduler.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n"
        "- {urlPrefix: 'http://gpu-ext.kube-system.svc:8888/scheduler', filterVerb: filter, weight: 3,"
        " prioritizeVerb: prioritize}\n"
    )
    settings.EXTPROXY_CONFIG = str(path)
    bootstrap()
    (backend,) = ConfiguredBackend.objects.all()
    assert backend.name == "gpu-ext-scheduler" and backend.weight == 3

    client.login(username="admin", password="pw")
    listing = client.get("/admin/extproxy/configuredbackend/")
    assert listing.status_code == 200 and b"gpu-ext-scheduler" in listing.content
    assert client.get("/admin/extproxy/configuredbackend/add/").status_code == 403
    change = client.post(f"/admin/extproxy/configuredbackend/{backend.pk}/change/", {"weight": 9})
    assert change.status_code == 403 and ConfiguredBackend.objects.get().weight == 3


def test_it_stops_on_a_bad_configuration_with_the_field(tmp_path, settings):
    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n- {name: a, urlPrefix: 'http://a:1/x', prioritizeVerb: p}\n")
    settings.EXTPROXY_CONFIG = str(path)
    with pytest.raises(CommandError, match=r"backends\[0\]\.weight.*positive weight"):
        bootstrap()


def test_it_refuses_to_start_the_server_on_a_bad_configuration(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n- {name: a, urlPrefix: 'http://a:1/x', bindVerb: b}\n- {name: b, urlPrefix: 'http://b:1/x', bindVerb: b}\n")
    env = dict(os.environ, EXTPROXY_CONFIG=str(path))
    env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)
    result = subprocess.run([sys.executable, "-c", "import extproxy.asgi"], cwd=Path(__file__).parent.parent,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "only one extender can implement bind" in result.stderr and "bindVerb" in result.stderr


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_it_bootstraps_two_replicas_starting_together(database, tmp_path, request):
    """Two `bootstrap --migrate` at once on a fresh database: both succeed, one admin, one set of
    backends (before the start lock, the second died of IntegrityError on auth_user)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXTPROXY_", "DATABASE_URL"))}
    env.update(DJANGO_SETTINGS_MODULE="extproxy.settings", EXTPROXY_DATA_DIR=str(tmp_path))
    if database == "postgresql":
        env["DATABASE_URL"] = request.getfixturevalue("postgres_url")
    root = Path(__file__).resolve().parent.parent
    processes = [
        subprocess.Popen([sys.executable, "manage.py", "bootstrap", "--migrate"], cwd=root, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=240) for p in processes]

    assert [p.returncode for p in processes] == [0, 0], outputs
    printed = [out for out, _ in outputs if "created user admin with password" in out]
    assert len(printed) == 1  # the random password is made and shown once
    check = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.contrib.auth.models import User; "
         "from extproxy.models import ConfiguredBackend; "
         "print(User.objects.filter(username='admin').count(), ConfiguredBackend.objects.count())"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60,
    )
    assert check.stdout.split() == ["1", "1"], check.stderr
