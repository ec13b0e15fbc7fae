"""Where a call goes: an HTTP extender or the built-in policy module, behind one contract."""
from __future__ import annotations

from ..config import BackendConfig
from .base import Backend, Exchange
from .http import HTTPBackend
from .policy import PolicyBackend


def build_backend(config: BackendConfig, policies: dict) -> Backend:
    if config.policy:
        return PolicyBackend(config, policies[config.policy])
    return HTTPBackend(config)


__all__ = ["Backend", "Exchange", "HTTPBackend", "PolicyBackend", "build_backend"]
