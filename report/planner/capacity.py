"""The capacity plan: a small ledger of theory values from a model's config, a GPU's datasheet row
and the settings, with what it modelled, what it did not and its warnings in codes
(report.planner.notes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from report.architecture import fit
from report.architecture import kvlayout as K
from report.architecture import theory as th
from report.architecture.gpus import lookup_gpu, normalize_dtype
from report.ledger import Absent, Ledger, Reason
from report.phases import resolve_selected
from report.planner import notes as N
from report.planner import quantities  # noqa: F401 (registers what the plan phases resolve)
from report.planner.notes import Note
from report.registry import RawSources


@dataclass(frozen=True)
class Plan:
    """A capacity plan: its ledger, the model's shape, the GPU, the KV layout and the notes in codes."""

    ledger: Ledger
    shape: th.ModelShape
    spec: Any
    layout: K.KVLayout
    modelled: list[Note]
    not_modelled: list[Note]
    warnings: list[Note]


def _not_given(flag: str) -> Reason:
    """Why a command-line input is absent: the flag that was not given."""
    return Reason.of("reason.not_given_flag", flag=flag)


def _refuse_tp(shape: th.ModelShape, tp: int) -> None:
    """Raise Absent when vLLM would refuse this TP size, naming the sizes it accepts."""
    why = fit.tp_refusal(shape.heads, shape.kv_heads, tp, shape.is_mla)
    if why:
        sizes = ", ".join(map(str, fit.valid_tp_sizes(shape.heads, shape.kv_heads, shape.is_mla)))
        raise Absent("reason.tp_refused", tp=tp, why=why, sizes=sizes)


GPU_TABLE = ("report/data/gpus.toml",)       # where a GPU's row comes from

# Observed inputs: (key, value, unit, doc, sources, the reason when it is absent).
Observed = tuple[str, Any, str, str, tuple[str, ...], Reason | None]


def _pool_given(kv_memory_gib: float | None, kv_pool_tokens: int | None,
                kv_pool_blocks: int | None) -> tuple[tuple[str, ...], list[Observed]]:
    """The pool's groups in the order they resolve, and what it records, for whichever size was given."""
    if kv_memory_gib is not None:
        return ("memory", "from_blocks"), []
    if kv_pool_tokens is not None:
        return ("tokens", "scaled"), [("kv_pool_tokens", kv_pool_tokens, "tokens",
                                       "KV pool per GPU in tokens per group, as logged (--kv-pool-tokens)", (), None)]
    if kv_pool_blocks is not None:
        return ("from_blocks", "scaled"), [("kv_pool_blocks", kv_pool_blocks, "blocks",
                                            "KV pool per GPU in blocks, as num_gpu_blocks (--kv-pool-blocks)", (), None)]
    why = Reason.of("reason.give_kv_size")
    return (), [("kv_memory_bytes", None, "B", "KV memory per GPU", (), why),
                ("kv_pool_blocks", None, "blocks", "KV pool per GPU", (), why),
                ("kv_pool_tokens", None, "tokens", "KV pool per GPU", (), why),
                ("mha_kv_pool_blocks", None, "", "KV pool if MHA", (), why),
                ("mha_kv_pool_tokens", None, "tokens", "KV pool if MHA", (), why)]


def plan_raw(config: dict[str, Any], gpu_name: str, *, tp: int, dtype: str, kv_dtype: str, block_size: int,
             gpu_memory_utilization: float) -> RawSources:
    """The plan's raw inputs by name: the model's shape (citing its config.json), the GPU's row
    (citing the table), the settings; Absent for a config or TP vLLM cannot serve, LookupError
    for an unknown GPU. The KV layouts join once KV per token is known."""
    shape = th.model_shape(config, dtype)
    spec = lookup_gpu(gpu_name)
    if spec is None:
        raise LookupError(gpu_name)
    _refuse_tp(shape, tp)
    raw = RawSources()
    raw.add("config", shape, ("config.json",))
    raw.add("shape", shape, ("config.json",))
    raw.add("spec", spec, GPU_TABLE)
    raw.add("gpu_name", spec.name)
    raw.add("dtype", normalize_dtype(shape.dtype))
    raw.add("model_dtype_bytes", shape.dtype_bytes)
    raw.add("attention_width", shape.attention_width)
    raw.add("kv_layers", shape.kv_layers)
    raw.add("kv_cache_dtype", kv_dtype)
    raw.add("tp", tp)
    raw.add("block_size", block_size)
    raw.add("gpu_memory_utilization", gpu_memory_utilization)
    return raw


def plan(config: dict[str, Any], gpu_name: str, *, tp: int = 1, dtype: str = "auto", kv_dtype: str = "auto",
         block_size: int = 16, concurrency: int | None = None, input_len: int | None = None,
         output_len: int | None = None, kv_memory_gib: float | None = None,
         kv_pool_tokens: int | None = None, kv_pool_blocks: int | None = None,
         gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
         max_num_batched_tokens: int | None = None) -> Plan:
    """The capacity plan; Absent for a config or TP vLLM cannot serve, LookupError for an unknown GPU."""
    raw = plan_raw(config, gpu_name, tp=tp, dtype=dtype, kv_dtype=kv_dtype, block_size=block_size,
                   gpu_memory_utilization=gpu_memory_utilization)
    shape, spec = raw.values["shape"], raw.values["spec"]
    lg = Ledger()
    table, no_row = GPU_TABLE, Reason.of("reason.gpu_row_lacks")
    pool_groups, pool_observed = _pool_given(kv_memory_gib, kv_pool_tokens, kv_pool_blocks)
    observed: list[Observed] = [
        ("concurrency", concurrency, "", "Concurrent requests", (), _not_given("--concurrency")),
        ("input_len", input_len, "tokens", "Prompt tokens per request", (), _not_given("--input-len")),
        ("output_len", output_len, "tokens", "Output tokens per request", (), _not_given("--output-len")),
        ("kv_memory_gib", kv_memory_gib, "GiB", "KV memory per GPU", (), _not_given("--kv-memory-gib")),
        *pool_observed,
        ("peak_bandwidth", spec.memory_bandwidth, "B/s", f"Peak memory bandwidth of the {spec.name}", table, no_row),
        ("power_limit_w", spec.power_limit_w, "W", f"Power limit of the {spec.name}", table, no_row),
        ("gpu_memory_bytes", spec.memory_bytes, "B", f"Memory of the {spec.name}", table, no_row),
        ("max_model_len", max_model_len or shape.max_position_embeddings, "tokens",
         "max_model_len (--max-model-len, else the config's max_position_embeddings)", (),
         Reason.of("reason.give_max_model_len")),
        *([("max_num_batched_tokens", max_num_batched_tokens, "tokens", "Prefill chunk (--max-num-batched-tokens)",
            (), None)] if max_num_batched_tokens is not None else []),
    ]
    for key, value, unit, doc, sources, missing in observed:
        lg.record(key, value, unit=unit, doc=doc, sources=sources, missing=missing)
    chunk = ("default_chunk",) if max_num_batched_tokens is None else ()
    groups = ("kv", "layout", *pool_groups, *chunk, "")
    layouts: list[K.KVLayout] = []

    def inputs(phase, group) -> Iterator[tuple[str, RawSources]]:
        """The plan's raw inputs for each group the given sizes select; the KV layouts once KV per token is known."""
        if group == "layout":
            layer, mha = lg["kv_layer_bytes_per_token"], lg["mha_kv_bytes_per_token"]
            layouts.append(K.kv_layout(shape.kinds, shape.sliding_window, layer.value, block_size))
            raw.add("layout", layouts[0])
            raw.add("mha_layout", K.kv_layout(shape.kinds, shape.sliding_window, mha.value // shape.kv_layers,
                                              block_size) if mha.present else None)
        if group in groups:
            yield "", raw

    resolve_selected(lg, "plan", inputs)
    layout = layouts[0]

    settings = {"tp": tp, "dtype": dtype, "kv_dtype": kv_dtype, "concurrency": concurrency,
                "input_len": input_len, "output_len": output_len, "kv_pool_tokens": kv_pool_tokens,
                "gpu_memory_utilization": gpu_memory_utilization}
    return Plan(lg, shape, spec, layout,
                modelled=N.modelled_notes(shape, layout, lg, settings),
                not_modelled=N.unmodelled_notes(shape, config, settings),
                warnings=N.warning_notes(shape, layout, lg, spec, settings))
