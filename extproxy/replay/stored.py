"""A replay item's stored diff as the run page, its fragment and the API read it.

Diffs are stored as they were made (storing.store) and kept for the run's life, so a run read
today may hold diffs of an older shape: those stored before a combined call's parts were
compared have no "parts" key. Such a diff is read with "parts": None, which every reader shows
as "not compared": an empty list would say that no backend's part changed, which nobody checked.

`summary` is what the run page shows of one changed call without its node changes (those can be
hundreds per call; the page loads them for one call when its row is opened).
"""
from __future__ import annotations

import json
import zlib
from typing import Any

# What a diff of the first stored shape lacks, and what it means there.
OLDER_SHAPE_DEFAULTS: dict[str, Any] = {"parts": None, "kinds": {}, "nodes": [], "more_nodes": 0,
                                        "outcome": None, "error": None, "winner": None}


def item_diff(item) -> dict | None:
    """The item's diff (None when it has none: an error, a skipped bind), in today's shape."""
    if not item.diff_blob:
        return None
    stored = json.loads(zlib.decompress(bytes(item.diff_blob)))
    return {**OLDER_SHAPE_DEFAULTS, **stored} if isinstance(stored, dict) else None


def node_changes(diff: dict) -> int:
    """How many node changes the diff counted (those past the stored bound included)."""
    return len(diff.get("nodes") or ()) + int(diff.get("more_nodes") or 0)


def summary(diff: dict | None, combined: bool | None) -> dict | None:
    """One changed call's row on the run page: its kinds of change with their counts, the
    outcome, error and parts that changed, the best node, and the number of node changes.
    `combined`: whether the call is a combined one (None when its original is gone): only
    there does a diff without parts need to say they were not compared."""
    if diff is None:
        return None
    winner = diff.get("winner")
    return {
        "kinds": sorted((diff.get("kinds") or {}).items()),
        "outcome": diff.get("outcome"),
        "error": diff.get("error"),
        "parts": diff.get("parts") or [],
        "parts_not_compared": diff.get("parts") is None and combined is not False,
        "winner": winner if winner and winner.get("before") != winner.get("after") else None,
        "node_changes": node_changes(diff),
    }
