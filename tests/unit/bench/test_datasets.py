"""ShareGPT loader (bench/datasets.py): a cut tail read up to its last whole record and
counted, vLLM's length filters with counts, and malformed records named by line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.datasets import load_sharegpt
from bench.prompts import PlanError

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traffic"


def words(s: str) -> int:
    return len(s.split())


def conv(user: str, reply: str, **extra) -> dict:
    return {"id": "x", "conversations": [{"from": "human", "value": user},
                                          {"from": "gpt", "value": reply}], **extra}


def test_a_cut_file_reads_its_whole_records_and_counts_the_cut():
    d = load_sharegpt(str(FIX / "sharegpt-cut.json"), words)
    assert [(r.input_len, r.output_len) for r in d.requests] == [(5, 6)]
    assert d.read == 2 and d.dropped == {"too_short": 1, "cut_tail": 1}
    assert d.cut_bytes == len('{"id": "c", "conversations": [{"from": "human", "value": "a cut off conve')


def test_vllm_filters_each_counted(tmp_path):
    w = lambda k: " ".join(["w"] * k)  # noqa: E731
    rows = [conv(w(4), w(4)), conv(w(3), w(10)), conv(w(10), w(3)), conv(w(1025), w(4)),
            conv(w(1000), w(1049)), conv(w(1000), w(1048)),
            {"conversations": [{"from": "gpt", "value": "no user"}]},
            {"conversations": [{"from": "human", "value": w(5)}]}]
    p = tmp_path / "d.json"
    p.write_text(json.dumps(rows, indent=1))
    d = load_sharegpt(str(p), words)
    assert [(r.input_len, r.output_len) for r in d.requests] == [(4, 4), (1000, 1048)]
    assert d.dropped == {"too_short": 2, "prompt_too_long": 1, "total_too_long": 1, "no_reply": 2}
    assert d.read == 8 and d.cut_bytes == 0
    assert len(load_sharegpt(str(p), words, limit=1).requests) == 1


def test_jsonl_with_a_cut_last_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(conv("a b c d e", "f g h i")) + "\n" + '{"conversations": [{"fr')
    d = load_sharegpt(str(p), words)
    assert len(d.requests) == 1 and d.dropped == {"cut_tail": 1}


def test_a_malformed_record_inside_a_closed_file_is_named(tmp_path):
    p = tmp_path / "d.json"
    p.write_text('[\n' + json.dumps(conv("a b c d", "e f g h")) + ',\n{"conversations": 5}\n]')
    with pytest.raises(PlanError, match=r"d.json line 3: field conversations"):
        load_sharegpt(str(p), words)
    p.write_text('[\n' + json.dumps(conv("a b c d", "e f g h")) + ',\n{"conv": ]\n]')
    with pytest.raises(PlanError, match=r"d.json line 3: not a JSON record"):
        load_sharegpt(str(p), words)
    good = json.dumps(conv("a b c d", "e f g h"))
    p.write_text(good + '\n{bad\n' + good + '\n')
    with pytest.raises(PlanError, match=r"d.json line 2: not a JSON record"):
        load_sharegpt(str(p), words)


def test_lengths_are_the_served_models_token_counts(tmp_path):
    from tokenizers import Tokenizer

    from bench.datasets import model_token_counter
    from bench.tinymodel import write_model_dir
    model = write_model_dir(tmp_path / "m")
    count = model_token_counter(str(model))
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    text = "the quick brown fox jumps over the lazy dog " * 3
    assert count(text) == len(tok.encode(text, add_special_tokens=False).ids) > 0
    with pytest.raises(PlanError, match="tokenizer.json"):
        model_token_counter(str(tmp_path))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 6), frac=st.floats(0.0, 1.0))
def test_a_file_cut_anywhere_reads_exactly_its_whole_records(tmp_path_factory, n, frac):
    rows = [conv(f"user {i} " + "w " * 4, f"reply {i} " + "r " * 4) for i in range(n)]
    text = json.dumps(rows, indent=1)
    cut = 1 + int(frac * (len(text) - 1))
    p = tmp_path_factory.mktemp("cut") / "d.json"
    p.write_text(text[:cut])
    ends = []
    for r in rows:
        body = json.dumps(r, indent=1).replace("\n", "\n ")
        ends.append(text.index(body) + len(body))
    whole = sum(e <= cut for e in ends)
    if whole == 0:
        with pytest.raises(PlanError, match="no conversation kept"):
            load_sharegpt(str(p), words)
        return
    d = load_sharegpt(str(p), words)
    assert len(d.requests) == d.read == whole
    # A cut tail is counted when a record had begun after the last whole one.
    assert ("cut_tail" in d.dropped) == ("{" in text[ends[whole - 1]:cut])


def test_a_dataset_that_cannot_be_read_is_refused_before_the_bundle_exists(tmp_path):
    from bench.plan.parse import plan_from_dict
    from bench.runner import run_round
    from bench.tinymodel import write_model_dir
    model = write_model_dir(tmp_path / "m")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(conv("a b c d e", "f g h i j")) + "\n" + "[" * 100_000 + "\n")
    plan = plan_from_dict({"engine": {"model_config": str(model / "config.json")},
                           "workload": {"kind": "sharegpt", "dataset": str(data)},
                           "sweep": {"concurrency": [1], "requests_per_point": 2}}, "p.toml")
    with pytest.raises(PlanError, match=r"d.jsonl line 2: a record nested deeper than it can be read"):
        run_round(plan, tmp_path / "b", endpoint_override="http://127.0.0.1:9")
    assert not (tmp_path / "b").exists()       # not even the lock
