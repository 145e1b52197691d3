"""A round's points as llm-d's benchmark reports (BR v0.2.1), one report per point measured to the end.

The schema is llm-d-benchmark's (`llmdbenchmark/analysis/benchmark_report/`, its JSON Schema
`br_v0_2_1_json_schema.json`; docs/peers.md): `run` (who and when), `scenario.stack` (the
inference engine), `scenario.load` (the workload generator: this tool, the point's load and
lengths) and `results.request_performance.aggregate` (requests, latency, throughput). Every
number written is a ledger value of the point (its key named in EXPORTED); a statistic whose
mean the ledger does not hold is left out, since the schema requires one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from bundle.schema import plan_titles
from report.derive.round.read import RoundData, ok_points
from report.ledger import Ledger

BR_VERSION = "0.2.1"
# The workload block's own schema version, as llm-d-benchmark's converters write it.
LOAD_SCHEMA_VERSION = "0.0.1"
TOOL = "serving-ledger"

# Each statistic: its place in `aggregate`, its units, then (field, point quantity) pairs; the
# first pair is the mean, which the schema requires.
EXPORTED = [
    (("latency", "time_to_first_token"), "ms",
     [("mean", "ttft_ms_mean"), ("p50", "ttft_ms_p50"), ("p90", "ttft_ms_p90"), ("p99", "ttft_ms_p99")]),
    (("latency", "time_per_output_token"), "ms/token",
     [("mean", "tpot_ms_mean"), ("p50", "tpot_ms_p50"), ("p99", "tpot_ms_p99")]),
    (("latency", "inter_token_latency"), "ms/token",
     [("mean", "client_itl_ms_mean"), ("p50", "itl_ms_p50"), ("p90", "itl_ms_p90"), ("p99", "itl_ms_p99")]),
    (("latency", "request_latency"), "ms",
     [("mean", "e2e_ms_mean"), ("p50", "e2e_ms_p50"), ("p99", "e2e_ms_p99")]),
    (("throughput", "output_token_rate"), "tokens/s", [("mean", "output_tok_s")]),
    (("throughput", "total_token_rate"), "tokens/s", [("mean", "total_tok_s")]),
    (("throughput", "request_rate"), "queries/s", [("mean", "req_s")]),
    (("requests", "input_length"), "count", [("mean", "prompt_tokens_sent_mean")]),
    (("requests", "output_length"), "count", [("mean", "output_tokens_sent_mean")]),
]
# Workloads whose prompts come from a file (a dataset, a trace, a conversation) rather than drawn.
SAMPLED_KINDS = ("sharegpt", "jsonl", "trace", "sessions")


class ExportError(ValueError):
    """A point the schema cannot take from its ledger; the message names it."""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _stack(rd: RoundData, led: Ledger, pid: str) -> list[dict]:
    """The inference engine the round ran against, as `scenario.stack`'s one component."""
    engine = rd.bundle.manifest.get("engine") or {}
    models = engine.get("models") or []
    model = (models[0].get("id") if models and isinstance(models[0], dict) else None) or "unknown"
    gpus = rd.gpus
    tp = _int(led.value_of(f"p.{pid}.tensor_parallel_size")) or 1
    command = engine.get("command")
    return [{
        "metadata": {"label": "vllm", "cfg_id": _digest(command or engine.get("server_sets") or {})},
        "standardized": {
            "kind": "inference_engine", "tool": "vllm", "tool_version": str(engine.get("vllm_version") or "unknown"),
            "role": "replica", "replicas": max(1, len(engine.get("endpoints") or []) or 1),
            "model": {"name": model},
            "accelerator": {"model": str(gpus[0].get("name")) if gpus else "cpu", "count": len(gpus),
                            "parallelism": {"tp": tp}},
        },
        "native": {"args": {"command": command} if command else None},
    }]


def point_report(rd: RoundData, led: Ledger, index: int, pid: str) -> dict:
    """Point PID (the INDEX-th point of the round) as one benchmark report."""
    p = next(q for q in rd.points if q.pid == pid)
    k = f"p.{pid}."
    plan = rd.bundle.manifest.get("plan") or {}
    tool = rd.bundle.manifest.get("tool") or {}
    work = plan.get("workload") or {}
    t0 = rd.bundle.manifest["clock"]["t0_wall_unix"]
    window = led.value_of(k + "window_s")

    def length(name: str, sent: str) -> dict | None:
        # Where each request brings its own length, the mean its usage reports; else the plan's.
        v = led.value_of(k + (sent if rd.lengths_vary else name))
        if v is None:
            return None
        return {"distribution": "other" if rd.lengths_vary else "fixed", "value": v}
    # A replayed trace sends at the trace's times: no concurrency or rate of its own.
    trace = (rd.bundle.manifest.get("workload_source") or {}).get("kind") == "trace"
    aggregate: dict[str, dict] = {"requests": {"total": int(led.value_of(k + "requests") or 0)
                                               + int(led.value_of(k + "failed") or 0),
                                               "failures": _int(led.value_of(k + "failed"))}}
    for (group, name), units, fields in EXPORTED:
        values = {f: led.value_of(k + q) for f, q in fields}
        if values["mean"] is None:
            continue
        aggregate.setdefault(group, {})[name] = {"units": units, **{f: v for f, v in values.items() if v is not None}}
    load = {"tool": TOOL, "tool_version": str(tool.get("version") or "unknown"),
            "parallelism": max(1, _int((plan.get("client") or {}).get("workers")) or 1),
            "source": "sampled" if work.get("kind") in SAMPLED_KINDS else "random",
            "stage": index,
            "input_seq_len": length("input_len", "prompt_tokens_sent_mean"),
            "output_seq_len": length("output_len", "output_tokens_sent_mean"),
            "rate_qps": led.value_of(k + "request_rate") if p.settings.get("request_rate") and not trace else None,
            "concurrency": None if trace else _int(led.value_of(k + "concurrency"))}
    if load["input_seq_len"] is None:
        # The schema requires it; a stand-in would be a number the ledger does not hold.
        raise ExportError(f"point {pid}: the ledger holds no prompt length, which the schema requires")
    return {
        "version": BR_VERSION,
        "run": {"uid": f"{rd.round_id or rd.name}.{pid}", "eid": rd.round_id or rd.name,
                "time": {"start": _iso(t0 + p.window.t_measure), "end": _iso(t0 + p.window.t_end),
                         "duration": f"PT{window:.3f}S" if window is not None else None},
                "description": plan_titles(plan.get("title")).get("en")},
        "scenario": {"stack": _stack(rd, led, pid),
                     "load": {"metadata": {"schema_version": LOAD_SCHEMA_VERSION, "cfg_id": _digest(plan)},
                              "standardized": load, "native": {"config": plan}}},
        "results": {"request_performance": {"aggregate": aggregate}},
    }


def benchmark_reports(rd: RoundData, led: Ledger) -> list[tuple[str, dict]]:
    """Each point measured to the end, in run order, as (point, its benchmark report)."""
    ok = {p.pid for p in ok_points(rd)}
    return [(p.pid, point_report(rd, led, i, p.pid)) for i, p in enumerate(rd.points) if p.pid in ok]
