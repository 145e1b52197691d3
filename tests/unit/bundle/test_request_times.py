"""A request's times are the client's: an ok request has a first-token time, and its chunks
arrive while it streams. A record that says otherwise is refused on read, naming the request."""

from __future__ import annotations

import pytest

from bundle.files import BundleError
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter


def bundle_of(tmp_path, **change):
    """A bundle of one point and three requests (HAND-BUILT), the last one changed by CHANGE."""
    w = BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}})
    w.append("points", {"point": "L8-c1", "event": "start", "t": 0.0, "settings": {}})
    for i in range(3):
        rec = {"point": "L8-c1", "i": i, "warmup": False, "status": "ok", "t_send": 1.0 + i,
               "t_first": 1.1 + i, "t_end": 1.5 + i, "chunks": [[1.1 + i, 1], [1.4 + i, 1]]}
        w.append("requests", {**rec, **(change if i == 2 else {})})
    w.append("points", {"point": "L8-c1", "event": "end", "t": 9.0, "status": "ok"})
    w.close("complete")
    return tmp_path / "b"


@pytest.mark.parametrize("change, words", [
    ({"t_first": None, "chunks": []}, "request i=2 of point 'L8-c1' is ok with no first-token time"),
    ({"chunks": [[3.1, 1], [1e308, 1]]}, "request i=2 of point 'L8-c1' has a chunk at t=1e+308, outside "
                                         "its send-to-end window [3.0, 3.5]"),
    ({"chunks": [[-50.0, 1], [3.4, 1]]}, "has a chunk at t=-50.0, outside"),
])
def test_a_request_whose_times_no_client_records_is_refused(tmp_path, change, words):
    with pytest.raises(BundleError) as e:
        read_bundle(bundle_of(tmp_path, **change))
    assert "requests.jsonl: " in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("change", [
    {"status": "error", "error": "HTTP 500", "t_first": None, "chunks": []},   # failed: no token
    {"chunks": [[3.9, 1], [4.2, 1]]},           # late by under a second: the stamps' offset
    {"t_end": None, "status": "error", "error": "cut", "chunks": [[3.1, 1], [80.0, 1]]},  # no end
])
def test_what_a_client_does_record_is_read(tmp_path, change):
    assert len(read_bundle(bundle_of(tmp_path, **change)).request_table) == 3
