"""Reading an older bundle upgrades its manifest in memory, step by step, to the current version."""

from __future__ import annotations

import json

import pytest

from bundle.files import BundleError
from bundle.store.manifest import SCHEMA_VERSION, upgrade_manifest, upgrade_to_2, upgrade_to_3
from bundle.store.reader import read_bundle
from tests.conftest import FIXTURES


def test_a_version_1_bundle_reads_with_the_load_format_as_a_field():
    raw = json.loads((FIXTURES / "cpu-demo" / "manifest.json").read_text())
    assert raw["schema_version"] == 1 and raw["model"]["name"].endswith("--load-format dummy)")
    m = read_bundle(FIXTURES / "cpu-demo").manifest
    assert m["schema_version"] == SCHEMA_VERSION == 3
    assert m["model"]["name"] == "tiny-qwen2" and m["model"]["load_format"] == "dummy"


def test_a_version_1_model_without_the_note_keeps_its_name():
    m = upgrade_to_2({"schema_version": 1, "model": {"name": "Qwen/Qwen2.5-7B-Instruct"}})
    assert m["model"] == {"name": "Qwen/Qwen2.5-7B-Instruct"} and m["schema_version"] == 2
    assert upgrade_to_2({"schema_version": 1})["model"] == {}


def test_versions_outside_the_chain_are_refused(tmp_path):
    with pytest.raises(BundleError, match="newer than this tool reads"):
        upgrade_manifest({"schema_version": SCHEMA_VERSION + 1}, tmp_path)
    with pytest.raises(BundleError, match="older than any this tool can upgrade"):
        upgrade_manifest({"schema_version": 0}, tmp_path)


def test_a_version_2_bundle_reads_as_version_3_unchanged():
    m = {"schema_version": 2, "model": {"name": "x"}, "engine": {"endpoint": "http://h:8000"}}
    assert upgrade_to_3(m) == {**m, "schema_version": 3}
