"""The data directory and the SQLite database kept readable by extproxy's user only.

The database holds every API token's key in plaintext, and the recorded calls; the directory
also holds the secret key. `mkdir(mode=0o700)` sets the mode only of a directory it creates:
one that already existed (made by hand, by an older version, a volume mounted 0755) stayed as
wide as it was, and SQLite creates its files 0644. So at every start the directory is set to
0700 and the database files to 0600, with a warning when either was wider.
"""
from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path


def keep_private(directory: Path, database: Path | None) -> None:
    """Makes `directory` (created if missing) 0700 and `database` with its WAL and shared-memory
    files 0600; the database file is created empty (a valid SQLite database) when missing, so
    that SQLite opens a private file rather than making one by its own mode."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _tighten(directory, 0o700)
    except OSError as error:  # said, and left to what uses the directory to fail with its reason
        warnings.warn(f"{directory}: could not be made private: {error}")
    if database is None or str(database) == ":memory:" or str(database).startswith("file:"):
        return  # PostgreSQL (the directory still holds the secret key and the spool), or no file
    try:
        if not database.exists() and database.parent.is_dir():
            try:
                os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:  # another process created it first
                pass
        for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            if path.exists():
                _tighten(path, 0o600)
    except OSError as error:  # a read-only place: SQLite says why when it opens it
        warnings.warn(f"{database}: could not be made private: {error}")


def _tighten(path: Path, mode: int) -> None:
    current = stat.S_IMODE(path.stat().st_mode)
    if current & ~mode:
        try:
            path.chmod(mode)
        except OSError as error:  # not ours (another user's file): say so, start all the same
            warnings.warn(f"{path} is mode {current:o}, readable by others, and could not be made {mode:o}: {error}")
            return
        warnings.warn(f"{path} was mode {current:o}, readable by others: made {mode:o}")
