"""Strings that are not well-formed Unicode, read as Go's encoding/json reads them (unquoteBytes):
each byte that is no UTF-8, and each half of a surrogate pair alone, is U+FFFD."""
from __future__ import annotations

import pytest

from extproxy.protocol import (
    ProtocolError, decode_binding_result, decode_filter_result, decode_host_priority_list, read_extender_args,
)
from extproxy.protocol.gostrings import go_strings


@pytest.mark.parametrize("body, read", [
    (b'"x \\ud800"', "x \ufffd"),  # a high half at the end
    (b'"\\udc00y"', "\ufffdy"),  # a low half alone
    (b'"\\ud800\\u0041"', "\ufffdA"),  # a high half before an escape that is no low half
    (b'"\\udc00\\ud800"', "\ufffd\ufffd"),  # the halves the wrong way round
    (b'"\\ud83d\\ude00"', "\U0001f600"),  # a pair: as it was
    (b'"\\ud83d x\\ude00"', "\ufffd x\ufffd"),  # halves apart: no pair
    (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text: no escape at all
    (b'"\\\\ud800\\udc00"', "\\ud800\ufffd"),  # ... and a low half after that text: alone
    (b'"a\xffb"', "a\ufffdb"),
    (b'"\xe2\x82|\xf0\x9f\x98"', "\ufffd\ufffd|\ufffd\ufffd\ufffd"),  # cut sequences: one U+FFFD a byte, as Go
    (b'"\xed\xa0\x80"', "\ufffd\ufffd\ufffd"),  # a surrogate encoded in UTF-8 is no UTF-8
])
def test_it_reads_each_odd_unit_as_the_replacement_character(body, read):
    reply = b'{"Error": ' + body + b"}"
    assert decode_binding_result(reply).error == read


def test_keys_and_every_message_are_read_so():
    args = read_extender_args(b'{"Pod":{"metadata":{"name":"\xff\xfe","namespace":"ns\\ud800"}},"NodeNames":["a"]}')
    assert args.pod_identity[:2] == ("ns\ufffd", "\ufffd\ufffd")
    assert decode_host_priority_list(b'[{"Host":"n\\ud800","Score":3}]')[0].host == "n\ufffd"
    result = decode_filter_result(b'{"NodeNames":["a\xffb"],"FailedNodes":{"k\\udfff":"r"},"Error":""}', names_only=True)
    assert result.node_names == ["a\ufffdb"] and result.failed_nodes == {"k\ufffd": "r"}


def test_a_well_formed_body_is_left_alone_and_what_stays_wrong_is_a_protocol_error():
    assert go_strings(b'{"Error":"\\ud83d\\ude00 \xc3\xa9","x":"\\\\ud800"}') is None
    with pytest.raises(ProtocolError, match="unexpected EOF"):
        decode_binding_result(b'{"Error":"\\ud800')  # still cut short once read as Go does
    with pytest.raises(ProtocolError):
        decode_filter_result(b'{"NodeNames":[5\xff]}')  # a byte outside any string: no JSON either way


def test_at_most_max_odd_units_are_read_so_and_a_body_of_more_is_refused():
    """Each odd unit costs a Python call: a body of nothing else would hold a core for seconds."""
    from extproxy.protocol.gostrings import MAX_ODD

    assert decode_binding_result(b'{"Error":"' + b"\\ud800" * MAX_ODD + b'"}').error == "\ufffd" * MAX_ODD
    assert decode_binding_result(b'{"Error":"' + b"\xff" * MAX_ODD + b'"}').error == "\ufffd" * MAX_ODD
    for odd in (b"\\ud800", b"\xff"):
        with pytest.raises(ProtocolError):
            decode_binding_result(b'{"Error":"' + odd * (MAX_ODD + 1) + b'"}')
