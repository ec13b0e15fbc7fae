"""Old import path of retention; it moved to extproxy.recording.retention."""
from .recording.retention import CHUNK, PRUNE_EVERY, TOUCH_EVERY, Pruned, prune  # noqa: F401
