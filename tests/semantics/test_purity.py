"""extproxy.semantics is pure: no Django, no I/O; it builds on extproxy.protocol only."""

from __future__ import annotations

from tests.purity import impure_modules, written_imports


def test_it_loads_nothing_from_django_or_io():
    assert impure_modules("extproxy.semantics") == set()


def test_it_imports_only_protocol_and_plain_standard_modules():
    allowed = {"__future__", "dataclasses", "enum", "typing", "msgspec", "extproxy"}
    assert written_imports("extproxy.semantics") <= allowed
