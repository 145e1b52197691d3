"""The served model's config.json as the collector reads it: a folder named for it gives its own
tokenizer (not its parent's), and a config that is no finite JSON object is not taken."""

from __future__ import annotations

import pytest

from bench.cli import plan_from_args
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.provenance import collect_model_config
from bench.round_manifest import dataset_tokenizer
from serving_ledger.cli import build_parser


def test_a_model_config_folder_is_where_its_tokenizer_is(tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"vocab_size": 10}')
    plan = plan_from_dict({"engine": {"mode": "endpoint", "endpoint": "http://h:1",
                                      "model_config": str(model)}})
    assert dataset_tokenizer(plan) == str(model)
    plan.engine.model_config = str(model / "config.json")
    assert dataset_tokenizer(plan) == str(model)
    assert collect_model_config(model) == ({"vocab_size": 10}, str(model / "config.json"))


@pytest.mark.parametrize("text", ['{"vocab_size": NaN}', '{"x": Infinity}', "[1, 2]",
                                  "[" * 100_000 + "]" * 100_000, '{"a": 1'])
def test_a_config_that_is_no_finite_json_object_is_not_taken(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    assert collect_model_config(tmp_path) == (None, None)


def test_server_flags_that_are_no_command_line_are_one_line():
    args = build_parser().parse_args(["run", "--server-flags", '"x', "--out", "x"])
    with pytest.raises(PlanError, match=r"^--server-flags: '\"x' is not a command line \(No closing quotation\)$"):
        plan_from_args(args)
