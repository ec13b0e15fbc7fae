"""The error texts the proxy answers so that the scheduler ends with the same error.

May import: the standard library and ``semantics.judge``. No Django, no I/O.
"""

from __future__ import annotations

from .judge import Verdict


def go_format_safe(text: str) -> str:
    """Text that comes out unchanged when the scheduler passes it to fmt.Errorf as the format."""
    return text.replace("%", "%%")


def reply_error_text(verdict: Verdict | None, transport_error: str = "") -> str:
    """The Error text the proxy answers so that the scheduler ends with this backend's error.

    An Error field from the backend goes verbatim (the scheduler formats it with fmt.Errorf in
    both setups); any other failure text has ``%`` doubled so fmt.Errorf prints it unchanged.
    """
    if verdict is not None and any(f["kind"] == "error-under-200" for f in verdict.findings):
        return verdict.error
    text = verdict.error if verdict is not None else (transport_error or "no answer")
    return go_format_safe(text)
