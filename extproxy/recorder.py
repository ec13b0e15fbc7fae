"""Old import path of the recorder, kept while other branches still import from it.

Everything moved to extproxy.recording (see its docstring); import from there.
"""
from .recording import LIVE_GROUP, NodeDeduper, Trace, compact_body, compress, decompress, restore_body  # noqa: F401
from .recording.blobs import restore  # noqa: F401
from .recording.attempts import AttemptTracker  # noqa: F401
from .recording.live import channel_layer_publisher  # noqa: F401
from .recording.local import LocalRecorder as Recorder  # noqa: F401
from .recording.rows import build_call, judge  # noqa: F401
