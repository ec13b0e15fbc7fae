"""Django's secret key when EXTPROXY_SECRET_KEY is not set: generated once into the data directory.

Never a fixed key: the first start writes a random key to `<data dir>/secret_key` (mode 0600)
and later starts read it back. Two processes starting together agree on one key: the key is
written to a temporary file and linked into place, which fails for the second writer, who then
reads the first one's key. This module must not log or print the key.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

FILE_NAME = "secret_key"


class SecretKeyError(RuntimeError):
    pass


def load_or_create(data_dir: Path) -> str:
    path = data_dir / FILE_NAME
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # the key, the database, the spool
        fd, temp = tempfile.mkstemp(dir=data_dir, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(64) + "\n")
            try:
                os.link(temp, path)  # atomic, and refuses to replace a key another process wrote
            except FileExistsError:
                pass
        finally:
            os.unlink(temp)
        return _read(path)
    except OSError as exc:
        raise SecretKeyError(
            f"no EXTPROXY_SECRET_KEY set and {path} cannot be written ({exc.strerror}): "
            "set EXTPROXY_SECRET_KEY or make EXTPROXY_DATA_DIR writable"
        ) from None


def _read(path: Path) -> str:
    key = path.read_text().strip()
    if len(key) < 50:
        raise SecretKeyError(f"{path} holds no usable key (fewer than 50 characters): remove it to make a new one")
    return key
