"""extproxy.protocol is pure: no Django, no I/O, nothing but msgspec and a few standard modules."""

from __future__ import annotations

from tests.purity import impure_modules, written_imports


def test_it_loads_nothing_from_django_or_io():
    assert impure_modules("extproxy.protocol") == set()


def test_it_imports_only_msgspec_and_plain_standard_modules():
    allowed = {"__future__", "codecs", "dataclasses", "enum", "functools", "typing", "re", "msgspec", "extproxy"}
    assert written_imports("extproxy.protocol") <= allowed
