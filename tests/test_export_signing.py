"""An auditor checks an export with the server's public key alone: manifests signed with Ed25519,
the key published by the API, exportproof.py run as a file on its own (no Django, no database,
no secret), a manifest re-signed by anyone else refused, a key that cannot be read refusing
exports before their first byte, and version 1 (HMAC) manifests still checked on their server."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
from datetime import datetime, timezone as tz
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management.base import CommandError
from django.test import override_settings

from extproxy import exportproof, exportsigning
from tests.test_export import auditor, bulk_calls, run_command, token_client

pytestmark = pytest.mark.django_db

PROOF_FILE = Path(exportproof.__file__)


def standalone(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """exportproof.py copied alone and run where importing Django fails: what an auditor has."""
    copy = cwd / "exportproof.py"
    copy.write_bytes(PROOF_FILE.read_bytes())
    runner = ("import runpy, sys; sys.modules['django'] = None; sys.modules['extproxy'] = None; "
              f"sys.argv = ['exportproof.py', *{list(args)!r}]; runpy.run_path({str(copy)!r}, run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "EXTPROXY", "DATABASE"))}
    return subprocess.run([sys.executable, "-I", "-c", runner], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def export_and_key(tmp_path):
    bulk_calls(30, 3, datetime(2026, 12, 1, tzinfo=tz.utc))
    client = auditor()
    published = client.get("/api/export/signing-key/")
    assert published.status_code == 200
    key = published.json()
    (tmp_path / "server.pub").write_text(key["pem"])
    response = client.get("/api/export/?format=csv")
    assert response.status_code == 200
    (tmp_path / "calls.csv").write_bytes(b"".join(response.streaming_content))
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/").json()
    (tmp_path / "calls.manifest.json").write_text(json.dumps(manifest))
    return tmp_path, key, manifest


def test_an_auditor_checks_an_export_with_the_public_key_alone(export_and_key):
    where, key, manifest = export_and_key
    assert manifest["manifest_version"] == 2
    assert manifest["signed_with"] == {"alg": "ed25519", "key_id": key["key_id"]}
    assert key["key_id"] == exportproof.key_id(base64.b64decode(key["public_key"]))
    done = standalone("calls.csv", "calls.manifest.json", "--public-key", "server.pub", cwd=where)
    assert done.returncode == 0, done.stderr
    assert "complete and unaltered: " in done.stdout and manifest["records"] > 0
    # The published base64 form is taken too.
    (where / "server.b64").write_text(key["public_key"])
    assert standalone("calls.csv", "calls.manifest.json", "--public-key", "server.b64", cwd=where).returncode == 0


def test_a_manifest_re_signed_by_anyone_else_is_refused(export_and_key):
    """The HMAC's weakness: whoever could verify could forge. Now a forger must hold the private key."""
    where, _, manifest = export_and_key
    lines = (where / "calls.csv").read_bytes().split(b"\n")
    del lines[5]  # a record removed, the chain rebuilt from it on, and the manifest re-signed
    header, records = lines[0], [line for line in lines[1:] if line]
    previous = exportproof.chain_start(manifest["export_id"], "csv", manifest["columns"])
    rebuilt = [header]
    for seq, line in enumerate(records, 1):
        body, _ = exportproof.split_line("csv", line)
        body = str(seq).encode() + body[body.index(b","):]
        previous = exportproof.link(previous, body)
        rebuilt.append(exportproof.with_hash("csv", body, previous))
    data = b"\n".join(rebuilt) + b"\n"
    (where / "calls.csv").write_bytes(data)
    forged = dict(manifest, records=len(records), last_hash=previous, file_sha256=hashlib.sha256(data).hexdigest(),
                  file_bytes=len(data))
    forged["calls"] = manifest["calls"] - 1 if "calls" in manifest else None
    (where / "forged.json").write_text(json.dumps(exportsigning.sign(forged, Ed25519PrivateKey.generate())))
    done = standalone("calls.csv", "forged.json", "--public-key", "server.pub", cwd=where)
    assert done.returncode == 1 and "not a trusted key" in done.stdout
    # Keeping the server's key id and signature, the altered manifest does not match it.
    unsigned = dict(forged, signed_with=manifest["signed_with"], signature=manifest["signature"])
    (where / "forged.json").write_text(json.dumps(unsigned))
    done = standalone("calls.csv", "forged.json", "--public-key", "server.pub", cwd=where)
    assert done.returncode == 1 and "signature does not match" in done.stdout
    with pytest.raises(CommandError, match="signature does not match"):
        run_command("verify_export", str(where / "calls.csv"), str(where / "forged.json"))


def test_the_standalone_check_names_what_it_could_not_read(export_and_key):
    where, _, _ = export_and_key
    (where / "bad.pub").write_text("not a key")
    done = standalone("calls.csv", "calls.manifest.json", "--public-key", "bad.pub", cwd=where)
    assert done.returncode == 2 and "neither PEM nor base64" in done.stderr
    rsa_like = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)[:16]
    (where / "short.pub").write_text(base64.b64encode(rsa_like).decode())
    done = standalone("calls.csv", "calls.manifest.json", "--public-key", "short.pub", cwd=where)
    assert done.returncode == 2 and "32 bytes, this is 16" in done.stderr


def test_verify_export_on_another_machine_pins_the_key_and_creates_none(export_and_key, tmp_path_factory):
    where, _, _ = export_and_key
    elsewhere = tmp_path_factory.mktemp("auditor-machine")
    with override_settings(DATA_DIR=str(elsewhere)):
        out, _ = run_command("verify_export", str(where / "calls.csv"), str(where / "calls.manifest.json"),
                             "--public-key", str(where / "server.pub"))
        assert "complete and unaltered" in out
        with pytest.raises(CommandError, match="not a trusted key"):  # no key of its own: trusts none
            run_command("verify_export", str(where / "calls.csv"), str(where / "calls.manifest.json"))
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("content", [b"", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                                     "rsa"], ids=["empty", "garbled", "rsa"])
def test_a_key_that_cannot_be_read_refuses_exports_before_their_first_byte(tmp_path, content):
    if content == "rsa":
        from cryptography.hazmat.primitives.asymmetric import rsa

        content = rsa.generate_private_key(public_exponent=65537, key_size=1024).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (tmp_path / exportsigning.KEY_FILE).write_bytes(content)
    with override_settings(DATA_DIR=str(tmp_path)):
        response = auditor().get("/api/export/?format=ndjson")
        assert response.status_code == 503
        assert "signing key" in response.json()["detail"] and exportsigning.KEY_FILE in response.json()["detail"]
        assert token_client("auditor", "second-auditor").get("/api/export/signing-key/").status_code == 503
    assert (tmp_path / exportsigning.KEY_FILE).read_bytes() == content  # never replaced by another key


def test_the_generated_key_is_private_and_kept(tmp_path):
    with override_settings(DATA_DIR=str(tmp_path)):
        first = exportsigning.published()
        assert exportsigning.published() == first  # made once, then read
    key_file = tmp_path / exportsigning.KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [exportsigning.KEY_FILE]  # no temporary file left


def test_a_set_key_signs_and_other_trusted_keys_verify_here(tmp_path):
    mine = Ed25519PrivateKey.generate()
    pem = mine.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()
    signed = exportsigning.sign({"manifest_version": 2, "records": 0}, mine)
    other_replica = base64.b64encode(exportsigning.public_raw(mine)).decode()
    assert exportproof.signature_problem(signed, exportsigning.trust()) is not None  # not trusted yet
    with override_settings(EXTPROXY_EXPORT_TRUSTED_KEYS=f" {other_replica} ,"):
        assert exportproof.signature_problem(signed, exportsigning.trust()) is None
    with override_settings(EXTPROXY_EXPORT_SIGNING_KEY=pem, DATA_DIR=str(tmp_path)):
        assert exportsigning.published()["key_id"] == signed["signed_with"]["key_id"]
        assert list(tmp_path.iterdir()) == []  # the set key is used, none generated


def test_a_version_1_manifest_is_checked_where_its_secret_is(tmp_path):
    secret = b"k" * 40
    manifest = {"manifest_version": 1, "records": 0}
    manifest["signature"] = hmac.new(secret, exportproof.canonical(manifest), hashlib.sha256).hexdigest()
    with override_settings(DATA_DIR=str(tmp_path)):
        assert "only where that secret is" in exportproof.signature_problem(manifest, exportsigning.trust())
        (tmp_path / exportsigning.LEGACY_HMAC_FILE).write_bytes(b"6b6b")  # a crash mid-write: part of a key
        assert "only where that secret is" in exportproof.signature_problem(manifest, exportsigning.trust())
        (tmp_path / exportsigning.LEGACY_HMAC_FILE).write_bytes(secret)
        assert exportproof.signature_problem(manifest, exportsigning.trust()) is None
        assert "does not match" in exportproof.signature_problem(dict(manifest, records=1), exportsigning.trust())


def test_the_command_prints_the_public_key_and_makes_keys_for_a_secret(tmp_path):
    with override_settings(DATA_DIR=str(tmp_path)):
        out, _ = run_command("export_signing_key")
        published = exportsigning.published()
    assert out.startswith(f"# key id {published['key_id']} (ed25519)\n") and published["pem"] in out
    assert exportproof.read_public_key(out.encode()) == base64.b64decode(published["public_key"])  # as saved
    new, _ = run_command("export_signing_key", "--new")
    with override_settings(EXTPROXY_EXPORT_SIGNING_KEY=new, DATA_DIR=str(tmp_path / "other")):
        assert exportsigning.published()["key_id"] != published["key_id"]  # taken as the key, a new one
    assert not (tmp_path / "other").exists()


def test_whoever_may_export_the_audit_trail_may_fetch_the_public_key():
    from django.contrib.auth.models import Permission, User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    user = User.objects.create_user("reader", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="view_audit"))
    client = APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)
    assert client.get("/api/audit/export/").status_code == 200
    assert client.get("/api/export/signing-key/").status_code == 200


# --- EXTPROXY_EXPORT_TRUSTED_KEYS: what the server publishes, pasted as it is -----------------------


def another_replica(tmp_path: Path, client) -> tuple[dict, str, dict]:
    """Another replica's key as its operator has it: a manifest it signed, what its
    `manage.py export_signing_key` prints, and its GET /api/export/signing-key/."""
    with override_settings(DATA_DIR=str(tmp_path / "replica-b"), EXTPROXY_EXPORT_SIGNING_KEY=""):
        signed = exportsigning.sign({"manifest_version": 2, "records": 0})
        printed, _ = run_command("export_signing_key")
        published = client.get("/api/export/signing-key/").json()
    return signed, printed, published


def test_trusted_keys_take_the_pem_and_base64_the_server_gives(tmp_path):
    signed, printed, published = another_replica(tmp_path, auditor())
    assert printed.startswith("# key id ") and "-----BEGIN PUBLIC KEY-----" in printed
    pem_line = " ".join(published["pem"].split())  # an env file's one line
    as_json = json.dumps(published["pem"])[1:-1]  # copied from the API's JSON: line breaks as \n
    other = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()  # as cryptography writes it
    assert exportproof.signature_problem(signed, exportsigning.trust()) is not None  # not trusted yet
    for setting in (printed, published["pem"], pem_line, as_json, published["public_key"],
                    f"{other}, {published['public_key']}", f"{published['public_key']}\n{printed}{other}"):
        with override_settings(EXTPROXY_EXPORT_TRUSTED_KEYS=setting):
            assert exportproof.signature_problem(signed, exportsigning.trust()) is None, setting
    keys = exportsigning.trusted_keys(f"{other}\n{printed},{published['public_key']}")
    assert len(keys) == 3 and keys[1] == keys[2] == base64.b64decode(published["public_key"])


@pytest.mark.parametrize("entry, says", [
    ("not-a-key", "entry 2 (not-a-key): neither PEM nor base64"),
    (base64.b64encode(b"k" * 31).decode(), "entry 2 (a2tra2tra2tra2tr...): an Ed25519 public key is 32 bytes, this is 31"),
    ("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA", "entry 2 (-----BEGIN): part of a PEM block without its matching"),
    ("rsa", "entry 2 (PEM PUBLIC KEY MIIBIjANBgkq...): an Ed25519 public key is needed, this is a"),
    ("private", "entry 2 is a PEM PRIVATE KEY: give its public half"),
])
def test_a_trusted_key_that_is_not_one_is_named_with_what_is_accepted(entry, says, tmp_path):
    from cryptography.hazmat.primitives.asymmetric import rsa

    if entry == "rsa":
        entry = rsa.generate_private_key(65537, 2048).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    elif entry == "private":
        entry = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    good = base64.b64encode(exportsigning.public_raw(Ed25519PrivateKey.generate())).decode()
    with override_settings(EXTPROXY_EXPORT_TRUSTED_KEYS=f"{good}\n{entry}"):
        with pytest.raises(exportsigning.SigningKeyError) as raised:
            exportsigning.trust()
        with pytest.raises(CommandError, match="EXTPROXY_EXPORT_TRUSTED_KEYS: entry 2"):
            (tmp_path / "m.json").write_text("{}")
            run_command("verify_export", str(tmp_path / "m.json"), str(tmp_path / "m.json"))
    message = str(raised.value)
    assert message.startswith("EXTPROXY_EXPORT_TRUSTED_KEYS: ") and says in message, message
    assert "each a PEM public key or its 32 bytes in base64" in message
    if "PRIVATE" in entry:
        assert entry.splitlines()[1][:8] not in message  # a secret is never repeated
