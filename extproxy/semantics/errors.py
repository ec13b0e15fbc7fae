"""The error texts the proxy answers so that the scheduler ends with the same error.

May import: the standard library, ``semantics.judge`` and ``semantics.urls``. No Django, no I/O.
"""

from __future__ import annotations

from .judge import Verdict
from .urls import url_password_replaced


def go_format_safe(text: str) -> str:
    """Text that comes out unchanged when the scheduler passes it to fmt.Errorf as the format."""
    return text.replace("%", "%%")


def reply_error_text(verdict: Verdict | None, transport_error: str = "", url: str = "") -> str:
    """The Error text the proxy answers so that the scheduler ends with this backend's error.

    An Error field from the backend goes verbatim (the scheduler formats it with fmt.Errorf in
    both setups); any other failure text has ``%`` doubled so fmt.Errorf prints it unchanged.
    A call that got no reply (``verdict`` None) is named by its URL as Go's client names it
    (`Post "<url>": <why>`): the operator reading the FailedScheduling event must learn which
    backend failed, as they would calling it directly; `why` is this proxy's own words. A call
    the proxy never made is not an exchange: ``not_called_error_text``.
    """
    if verdict is not None and any(f["kind"] == "error-under-200" for f in verdict.findings):
        return verdict.error
    if verdict is not None:
        return go_format_safe(verdict.error)
    text = transport_error or "no answer"
    return go_format_safe(f'Post "{url_password_replaced(url, "***")}": {text}' if url else text)


def not_called_error_text(backend_name: str, why: str) -> str:
    """The Error text for a backend the proxy did not call at all (its request could not be
    built, e.g. a node missing from the node cache): the proxy's own words, naming the backend
    by its name. Go's `Post "<url>": ...` would tell the operator that an exchange with the
    backend failed, and send them to a backend that never saw the call."""
    return go_format_safe(f"extproxy: backend {backend_name} was not called: {why}")
