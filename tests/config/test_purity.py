"""extproxy.config is pure but for reading its one file: no Django, no network, no database."""

from __future__ import annotations

from tests.purity import impure_modules, written_imports


def test_it_loads_nothing_from_django_or_io():
    assert impure_modules("extproxy.config") == set()


def test_it_reads_files_only_through_the_loader():
    allowed = {"__future__", "base64", "binascii", "dataclasses", "enum", "fractions", "json", "re",
               "typing", "urllib", "yaml", "extproxy"}
    assert written_imports("extproxy.config") <= allowed | {"pathlib"}
    for module in ("types", "decoder", "durations", "names"):
        assert written_imports(f"extproxy.config.{module}") <= allowed, module
