"""Tests for extproxy.protocol.types: the one Verb list and the failure-answer rule."""

from __future__ import annotations

import json

import pytest

from extproxy.protocol import TEXT, Verb, encode_failure


def test_it_lists_the_verbs_with_the_stored_values_and_labels():
    assert Verb.values == ["filter", "prioritize", "bind", "preempt"]
    assert Verb.choices == [("filter", "Filter"), ("prioritize", "Prioritize"), ("bind", "Bind"), ("preempt", "Preempt")]
    assert Verb.of("bind") is Verb.BIND and Verb.of("Bind") is None and Verb.of("") is None


@pytest.mark.parametrize("verb", [Verb.FILTER, Verb.BIND])
def test_it_answers_a_failure_in_the_error_field_for_filter_and_bind(verb):
    answer = encode_failure(verb, "extproxy: <down> & out", 504)
    assert answer.status == 200 and answer.content_type == "application/json"
    assert answer.body == b'{"Error":"extproxy: \\u003cdown\\u003e \\u0026 out"}'  # Go's HTML-safe escaping
    assert json.loads(answer.body) == {"Error": "extproxy: <down> & out"}


@pytest.mark.parametrize("verb", [Verb.PRIORITIZE, Verb.PREEMPT])
def test_it_answers_a_failure_with_a_status_for_prioritize_and_preempt(verb):
    assert encode_failure(verb, "extproxy: down", 504) == (504, b"extproxy: down", TEXT)
    assert encode_failure(verb, "extproxy: down").status == 502
