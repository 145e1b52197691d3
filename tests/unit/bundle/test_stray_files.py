"""Files in a bundle the writer did not put there, or that are not files, are refused by name:
a stray request shard would count its requests again, and the engine log is checked like the rest."""

from __future__ import annotations

import os
import shutil

import pytest

from bundle.files import BundleError
from bundle.store.reader import read_bundle
from tests.conftest import FIXTURES


@pytest.fixture
def bundle(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "cpu-demo", b)    # a recorded bundle (tests/fixtures/README.md)
    return b


def test_a_shard_the_manifest_does_not_list_is_refused_not_counted(bundle):
    n = len(read_bundle(bundle).request_table)
    shutil.copy(bundle / "requests.jsonl.gz", bundle / "requests.w0.jsonl.gz")
    with pytest.raises(BundleError, match=r"requests.w0.jsonl.gz: not among the manifest's files"):
        read_bundle(bundle)
    os.remove(bundle / "requests.w0.jsonl.gz")
    assert len(read_bundle(bundle).request_table) == n


def test_the_engine_log_must_be_a_regular_file_inside_the_bundle(bundle, tmp_path):
    assert "vLLM" in read_bundle(bundle).server_log()
    outside = tmp_path / "elsewhere.log"
    outside.write_text("GPU KV cache size: 777,777 tokens\n")
    os.remove(bundle / "server.log")
    os.symlink(outside, bundle / "server.log")
    with pytest.raises(BundleError, match="outside the bundle"):
        read_bundle(bundle).server_log()
    os.remove(bundle / "server.log")
    os.mkfifo(bundle / "server.log")
    with pytest.raises(BundleError, match="not a regular file"):
        read_bundle(bundle).server_log()
    os.remove(bundle / "server.log")
    assert read_bundle(bundle).server_log() is None


def test_a_request_line_written_twice_is_refused(bundle):
    import gzip
    lines = gzip.decompress((bundle / "requests.jsonl.gz").read_bytes()).splitlines(keepends=True)
    (bundle / "requests.jsonl.gz").write_bytes(gzip.compress(b"".join(lines + lines[:1])))
    with pytest.raises(BundleError, match=r"1 request record\(s\) repeat another's point, send, first-token and end times"):
        read_bundle(bundle)
