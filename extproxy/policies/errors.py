"""The policy module's one exception type, :class:`PolicyError`.

It names where in a policy mapping the problem is (``field``, e.g.
``rules[2].expression``) and why (``reason``); ``str(err)`` is
``"<field>: <reason>"``.
"""

from __future__ import annotations


class PolicyError(Exception):
    """A policy mapping is invalid (raised by :func:`parse_policy`)."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"
