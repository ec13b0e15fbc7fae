"""Secure defaults: the generated secret key, `check --deploy` in production settings, the
security headers, host checking, and throttled log-ins (429)."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRINT_KEY_HASH = (
    "import hashlib; from django.conf import settings; "
    "print(hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest())"
)


def django_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTPROXY_")}
    env.update(DJANGO_SETTINGS_MODULE="extproxy.settings", EXTPROXY_SKIP_CONFIG_CHECK="1", **extra)
    return env


def key_hash(data_dir: Path) -> str:
    result = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + PRINT_KEY_HASH], cwd=ROOT,
                            env=django_env(EXTPROXY_DATA_DIR=str(data_dir)), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_it_generates_a_secret_key_into_the_data_directory_once(tmp_path):
    first = key_hash(tmp_path / "a")

    assert key_hash(tmp_path / "a") == first  # read back on the next start
    key_file = tmp_path / "a" / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700  # the database and the spool are in it too
    assert len(key_file.read_text().strip()) >= 50
    assert key_hash(tmp_path / "b") != first  # never a fixed key
    old_default = hashlib.sha256(b"extproxy-insecure-dev-key-set-EXTPROXY_SECRET_KEY").hexdigest()
    assert first != old_default


def test_it_agrees_on_one_key_when_processes_start_together(tmp_path):
    code = "import django; django.setup(); " + PRINT_KEY_HASH
    env = django_env(EXTPROXY_DATA_DIR=str(tmp_path / "data-of-both"))
    processes = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
                 for _ in range(4)]
    hashes = {p.communicate(timeout=60)[0].strip() for p in processes}
    assert len(hashes) == 1 and all(p.returncode == 0 for p in processes)


def test_it_uses_the_secret_key_from_the_environment_without_writing_one(tmp_path):
    env = django_env(EXTPROXY_DATA_DIR=str(tmp_path), EXTPROXY_SECRET_KEY="k" * 20 + "ey-from-the-environment-0123456789")
    result = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + PRINT_KEY_HASH], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == hashlib.sha256(env["EXTPROXY_SECRET_KEY"].encode()).hexdigest()
    assert not (tmp_path / "secret_key").exists()


def check_deploy(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = django_env(EXTPROXY_DATA_DIR=str(tmp_path), **extra)
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_it_passes_check_deploy_with_the_production_settings(tmp_path):
    result = check_deploy(tmp_path, EXTPROXY_HTTPS="true", EXTPROXY_ALLOWED_HOSTS="extproxy.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_fails_check_deploy_without_https(tmp_path):
    result = check_deploy(tmp_path)
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


@pytest.mark.django_db
def test_it_sends_csp_and_refuses_unknown_hosts(client, settings):
    response = client.get("/accounts/login/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert client.get("/accounts/login/", HTTP_HOST="evil.example").status_code == 400


def test_it_sends_csp_on_the_asgi_path_too(transactional_db):
    """Under uvicorn the middleware chain is async: the policy is added there as well."""
    from django.conf import settings

    from tests.test_deploy_forwarded import ServedDjango

    with ServedDjango(trusted="127.0.0.1") as served:
        page = served.get("/accounts/login/")
    assert page.status_code == 200 and page.headers["Content-Security-Policy"] == settings.EXTPROXY_CSP


@pytest.mark.django_db
def test_it_sends_hsts_and_secure_cookies_behind_tls(client, settings, django_user_model):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SESSION_COOKIE_SECURE = True
    django_user_model.objects.create_user("u", password="pw")
    response = client.post("/accounts/login/", {"username": "u", "password": "pw"}, secure=True)
    assert response.status_code == 302
    assert response.cookies["sessionid"]["secure"]
    assert "max-age=31536000" in response["Strict-Transport-Security"]


@pytest.fixture
def fresh_throttles(settings):
    """Counters of this test only (a private in-process cache), with a limit of 5."""
    import uuid

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": uuid.uuid4().hex}}
    settings.EXTPROXY_LOGIN_FAILURES = 5


@pytest.mark.django_db
def test_it_throttles_failed_logins_on_the_login_form_with_429(client, django_user_model, fresh_throttles):
    django_user_model.objects.create_superuser("admin", "", "right")
    for _ in range(5):
        assert client.post("/accounts/login/", {"username": "admin", "password": "wrong"}).status_code == 200

    refused = client.post("/accounts/login/", {"username": "admin", "password": "right"})  # even the right one

    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert client.post("/admin/login/", {"username": "admin", "password": "right"}).status_code == 429
    # Another address and another user are not affected.
    other = client.post("/accounts/login/", {"username": "someone", "password": "x"}, REMOTE_ADDR="10.0.0.9")
    assert other.status_code == 200


@pytest.mark.django_db
def test_it_throttles_the_admin_login_form_too(client, django_user_model, fresh_throttles):
    django_user_model.objects.create_superuser("admin", "", "right")
    for _ in range(5):
        assert client.post("/admin/login/", {"username": "admin", "password": "wrong"}).status_code == 200
    assert client.post("/admin/login/", {"username": "admin", "password": "wrong"}).status_code == 429


@pytest.mark.django_db
def test_it_throttles_the_token_endpoint_with_429(client, django_user_model, fresh_throttles):
    django_user_model.objects.create_superuser("admin", "", "right")
    ok = client.post("/api/auth/token/", {"username": "admin", "password": "right"})
    assert ok.status_code == 200 and ok.json()["token"]
    for _ in range(5):
        assert client.post("/api/auth/token/", {"username": "admin", "password": "wrong"}).status_code == 400

    refused = client.post("/api/auth/token/", {"username": "admin", "password": "right"})

    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["[null, null]", '"admin"', "{\"username\": [1]}", "{"])
def test_it_answers_a_malformed_token_request_with_400(client, fresh_throttles, body):
    assert client.post("/api/auth/token/", body, content_type="application/json").status_code == 400


@pytest.mark.django_db
def test_it_bounds_token_requests_per_address_even_when_they_succeed(client, django_user_model, fresh_throttles):
    from rest_framework.throttling import ScopedRateThrottle

    django_user_model.objects.create_superuser("admin", "", "right")
    original = ScopedRateThrottle.THROTTLE_RATES
    ScopedRateThrottle.THROTTLE_RATES = {"auth-token": "3/min"}  # DRF reads the rates at import
    try:
        codes = [client.post("/api/auth/token/", {"username": "admin", "password": "right"}).status_code for _ in range(4)]
    finally:
        ScopedRateThrottle.THROTTLE_RATES = original
    assert codes == [200, 200, 200, 429]
