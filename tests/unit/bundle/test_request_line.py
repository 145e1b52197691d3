"""Request records are written with orjson: the lines must read back as what json.dumps
writes, to the last bit of every float."""

from __future__ import annotations

import json

from bundle.store.writer import request_line


def reference(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def test_request_lines_are_the_text_json_writes():
    records = [
        {"point": "L16-c2", "i": 5, "warmup": False, "t_sched": None, "t_send": 12.3456789,
         "chunks": [(12.36 + k * 0.01, 1) for k in range(50)] + [(13.0, None)],
         "usage": {"prompt_tokens": 16, "completion_tokens": 51}, "status": "ok"},
        {"point": "p", "error": "HTTP 400: {\"message\": \"模型 不存在 \\u00e9 \\\\ \\n\"}",
         "server_metrics": {"queue_time_ms": 0.1, "nested": [1, 2.5, {"a": [None, True]}]}},
        {"point": "p", "t": 1e-7, "big": 2 ** 53 + 1, "neg": -0.0, "small": 5e-324},
    ]
    for rec in records[:2]:
        assert json.loads(request_line(rec)) == json.loads(reference(rec))
    for rec in records:
        # Exponents may be spelled apart (1e-7 vs 1e-07); the values are identical.
        assert json.loads(request_line(rec)) == json.loads(reference(rec))


def test_what_orjson_refuses_is_still_written():
    rec = {"point": "p", "error": "bad byte \udcff from a server", 3: "int key"}
    assert json.loads(request_line(rec)) == json.loads(reference(rec))
