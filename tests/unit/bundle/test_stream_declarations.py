"""Each sample stream is declared once (bundle/schema.py STREAMS): the writer and the reader take
its file, fields, required fields and order from it, docs/bundle.md's table of files is written
from it (tools/stream_table.py) with what a record is and when, and the document names each of
its fields."""

from __future__ import annotations

import importlib.util
import re

from bundle.schema import STREAM, STREAMS, record_problem
from bundle.store import reader, streams
from tests.conftest import ROOT

DOC = ROOT / "docs" / "bundle.md"
# A row of the table of files: `file` | written | one line / content |
FILE_ROW = re.compile(r"^\| `([a-z]+)\.jsonl` \| [^|]* \| (.*) \|$", re.M)
LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")

spec = importlib.util.spec_from_file_location("stream_table", ROOT / "tools" / "stream_table.py")
stream_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stream_table)


def test_the_writer_and_the_reader_take_the_streams_from_their_declaration():
    assert streams.SAMPLE_FILES == tuple(s.name for s in STREAMS)
    assert streams.RECORD_FIELDS == {s.name: s.required for s in STREAMS}
    assert set(streams.ORDERED_STREAMS) == {s.name for s in STREAMS if s.ordered}
    assert set(streams.UNIQUE_KEY_STREAMS) == {s.name for s in STREAMS if s.unique_keys}
    assert all(set(s.required) <= set(s.fields) for s in STREAMS)
    assert STREAM["requests"].file == "requests.jsonl"


def test_a_record_is_checked_against_its_streams_fields():
    assert record_problem("host", {"t": 1.0, "cores": -1}) is not None
    assert record_problem("requests.w3", {"point": 1}) is not None
    assert record_problem("shards", {"t": 1.0, "point": "p", "worker": 0, "status": "ok"}) is None


def test_docs_bundle_lists_every_declared_stream_and_what_a_record_is():
    rows = {name: LINK.sub(r"\1", what) for name, what in FILE_ROW.findall(DOC.read_text(encoding="utf-8"))}
    assert sorted(rows) == sorted(STREAM), "docs/bundle.md's table of files is not bundle/schema.py's STREAMS"
    assert {n: rows[n] for n in STREAM} == {n: s.what for n, s in STREAM.items()}


def test_docs_bundle_table_of_files_is_the_one_written_from_the_declarations():
    block = stream_table.BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert block, "docs/bundle.md has no <!-- files --> block"
    assert block[2] == stream_table.files_table(), \
        "docs/bundle.md's table of files is stale: .venv/bin/python tools/stream_table.py --write"


def test_docs_bundle_names_every_field_of_every_stream():
    text = DOC.read_text(encoding="utf-8")

    def named(field: str) -> bool:
        """In backticks, or a key of a JSON example."""
        return re.search(rf'"{field}"|`[^`\n]*\b{field}\b[^`\n]*`', text) is not None
    missing = [f"{s.name}.{f}" for s in STREAMS for f in s.fields if not named(f)]
    assert missing == [], "fields bundle/schema.py declares that docs/bundle.md never names"


def test_the_reader_keeps_each_declared_stream_under_its_name():
    # requests are the columnar request table; every other stream is a list of records, read
    # as the bundle's attribute of the stream's name.
    b = reader.read_bundle(ROOT / "tests" / "fixtures" / "cpu-demo")
    assert sorted(b.samples) == sorted(s.name for s in STREAMS if s.name != "requests")
    assert all(getattr(b, name) is b.samples[name] for name in b.samples)
    assert b.points and b.metrics and b.client and b.dcgm == []
