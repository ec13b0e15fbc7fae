"""A time as extproxy writes it for readers (the API, exports and their manifests, the live
feed, gap reports): ISO 8601 with UTC written as "Z". One function, so every place writes the
same text. No Django."""
from __future__ import annotations

from datetime import datetime


def iso_z(value: datetime | None) -> str | None:
    """ISO 8601, "+00:00" written as "Z"; None for no time."""
    return value.isoformat().replace("+00:00", "Z") if value else None
