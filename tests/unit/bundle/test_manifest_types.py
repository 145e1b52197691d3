"""The manifest's fields the report reads are typed: one the readers would trip on (`gpus` as
strings, `plan.engine` as a string) is refused on read in one line naming it, and the writer
never writes one (nor a number that is not finite)."""

from __future__ import annotations

import json
import shutil

import pytest

from bundle.files import BundleError
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from tests.conftest import FIXTURES, run_bench


@pytest.fixture
def bundle(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "cpu-demo", b)    # a recorded bundle (tests/fixtures/README.md)
    return b


def edit(bundle, change) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    change(m)
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(gpus=["H200", "H200"]), "gpus[0] is 'H200', not an object"),
    (lambda m: m.update(gpus=[{"index": "0", "name": "H200"}]),
     "gpus[0] field 'index' is '0', not a whole number at or above 0"),
    (lambda m: m["plan"].update(engine="endpoint"), "plan field 'engine' is 'endpoint', not an object"),
    (lambda m: m["plan"]["engine"].update(endpoints=["http://a:1", 7]),
     "plan.engine.endpoints[1] is 7, not a string"),
    (lambda m: m["engine"].update(mode=3), "engine field 'mode' is 3, not a string"),
    (lambda m: m["model"].update(tokenizer_vocab_size="152064"),
     "model field 'tokenizer_vocab_size' is '152064'"),
    (lambda m: m.update(workload_source={"kind": "trace", "span_s": "long"}),
     "workload_source field 'span_s' is 'long', not a number or null"),
    (lambda m: m.update(gpu_absent_reason=True), "field 'gpu_absent_reason' is True, not a string or null"),
])
def test_a_manifest_field_of_the_wrong_type_is_refused_on_read_naming_it(bundle, change, words):
    edit(bundle, change)
    with pytest.raises(BundleError) as e:
        read_bundle(bundle)
    assert words in str(e.value) and "manifest.json: " in str(e.value)
    # `summary` says it in one line and exits 2 (it raised a TypeError from the ledger before).
    r = run_bench("summary", str(bundle), check=False, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr


@pytest.mark.parametrize("fields, words", [
    ({"gpus": ["H200"]}, "gpus[0] is 'H200', not an object"),
    ({"workload_source": {"kind": "trace", "span_s": float("nan")}}, "workload_source.span_s is nan"),
    ({"plan": {"engine": "endpoint"}}, "plan field 'engine' is 'endpoint'"),
])
def test_the_writer_never_writes_a_manifest_its_reader_refuses(tmp_path, fields, words):
    with pytest.raises(BundleError, match="not written, the reader would refuse it") as e:
        BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}, **fields})
    assert words in str(e.value)
    assert not (tmp_path / "b" / "manifest.json").exists()
