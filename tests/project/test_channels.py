"""The codecs two sides of the engine share: the batch <-> grader process lines
(autograder/grading/serve_channel.py) and the one value codec of the cases and the sandbox's
wire (autograder/core/value_codec.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autograder.core import cases
from autograder.core.protocol import Call, New
from autograder.grading import serve_channel as channel
from autograder.sandbox.inside import transport


def test_a_grade_request_and_its_replies_go_through_as_written():
    request = channel.GradeRequest((Path("/subs/0000"), Path("/subs/0001")), Path("/tmp/report.json"))
    line = channel.encode(request)
    assert line == b'{"folders": ["/subs/0000", "/subs/0001"], "report": "/tmp/report.json"}\n'
    assert channel.decode_request(line) == request and channel.decode_request(line.decode()) == request
    assert channel.encode(channel.Graded()) == b'{"ok": true}\n'
    for reply in (channel.Graded(), channel.Failed("the sandbox could not start: é")):
        assert channel.decode_reply(channel.encode(reply)) == reply


@pytest.mark.parametrize("line", [b"", b"not json", b"[1]", b'{"folders": ["a"]}', b'{"folders": "a", "report": "r"}',
                                  b'{"folders": [1], "report": "r"}', b'{"folders": [], "report": "r", "code": 1}'])
def test_a_malformed_request_says_what_a_request_is(line):
    with pytest.raises(channel.MalformedLine, match="a grade request"):
        channel.decode_request(line)


@pytest.mark.parametrize("line", [b"{}", b'{"ok": 1}', b'{"ok": false}', b'{"error": 3}', b'{"ok": true, "error": "x"}'])
def test_a_malformed_reply_is_refused(line):
    with pytest.raises(channel.MalformedLine, match="a grader's reply"):
        channel.decode_reply(line)


def test_the_wire_is_the_cases_format_exactly():
    """A value the cases format can write travels as that same JSON; what it writes lossily (a
    size, keys that are not strings) the wire keeps exactly."""
    value = (torch.float64, torch.device("meta"), [1, 2.5, None, "s"], {"a": (True,)},
             New("MultiHeadAttention", (8, 2), {"bias": False}))
    assert json.dumps(transport._Encoder().value(value)) == json.dumps(cases._encode(value))
    lossy = (torch.Size([2, 3]), {1: "a", "b": 2})
    assert cases._encode(lossy) == {"tuple": [{"tuple": [2, 3]}, {"dict": {"1": "a", "b": 2}}]}
    assert transport._Encoder().value(lossy) == {"tuple": [{"size": [2, 3]}, {"dict": [[1, "a"], ["b", 2]]}]}
    back = transport.unpack(*_frame({"v": lossy}))[1]["v"]
    assert type(back[0]) is torch.Size and back == lossy


def _frame(values: dict) -> tuple[bytes, bytes]:
    reader = transport.FrameReader()
    reader.feed(transport.pack({}, values))
    return reader.frame()


def test_a_case_decodes_with_the_same_codec():
    call = Call("attention", "softmax", (torch.tensor([[0.5, 1.0]], dtype=torch.float64),), {"dim": -1},
                dtype=torch.float32)
    text = cases.dumps("attention", {"call": call, "part": None, "expected": None, "what": "output"})
    again = cases.loads(text)["call"]
    assert again.dtype is torch.float32 and again.kwargs == {"dim": -1} and torch.equal(again.args[0], call.args[0])
