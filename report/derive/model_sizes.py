"""The model's sizes from its config and the GPU's peaks: what the KV, MFU and roofline sections divide by.

Round quantities (report/registry.py) over the round's raw `model_config` (the manifest's
model.config) and the GPU's datasheet peaks (`peak_flops`, `peak_bandwidth`, recorded by
round_ledger.peak_ledger from report/data/gpus.toml).
"""

from __future__ import annotations

from typing import Any, Mapping

from report.architecture import params as PA
from report.architecture import theory as T
from report.derive import analyses as A
from report.registry import round_quantity

Config = Mapping[str, Any]


@round_quantity(unit="B")
def kv_bytes_per_token(model_config: Config) -> int:
    """KV bytes per token from the architecture (every layer's K and V, the model's dtype)."""
    return T.model_kv_bytes_per_token(model_config)


@round_quantity(unit="B")
def kv_bytes_per_token_mha(model_config: Config) -> int:
    """KV bytes per token if every head had its own KV head (multi-head attention)."""
    return T.model_mha_kv_bytes_per_token(model_config)


@round_quantity(unit="")
def params_non_embedding(model_config: Config) -> int:
    """Parameters outside the embeddings, from the config."""
    return PA.model_params_non_embedding(model_config)


@round_quantity(unit="B")
def weight_bytes(model_config: Config) -> int:
    """Bytes the model's weights occupy, from the config."""
    return PA.model_weight_bytes(model_config)


@round_quantity(unit="GB")
def weight_gb(weight_bytes: int) -> float:
    """Bytes the model's weights occupy, in GB."""
    return A.giga(weight_bytes)


@round_quantity(unit="B")
def decode_read_bytes(model_config: Config) -> int:
    """Weight bytes one decode step reads (every matrix and the LM head; the input embedding only gathers rows)."""
    return PA.model_decode_read_bytes(model_config)


@round_quantity(unit="GB")
def decode_read_gb(decode_read_bytes: int) -> float:
    """Weight bytes one decode step reads, in GB."""
    return A.giga(decode_read_bytes)


@round_quantity(unit="FLOP/B")
def ridge(peak_flops: float, peak_bandwidth: float) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ peak memory bandwidth (FLOP per byte)."""
    return T.ridge_flops_per_byte(peak_flops, peak_bandwidth)


@round_quantity(unit="TFLOP/s")
def peak_tflops(peak_flops: float) -> float:
    """The GPU's dense tensor peak in TFLOP/s."""
    return A.tera(peak_flops)


@round_quantity(unit="TB/s")
def peak_tb_s(peak_bandwidth: float) -> float:
    """The GPU's peak memory bandwidth in TB/s."""
    return A.tera(peak_bandwidth)


@round_quantity(unit="ms")
def decode_floor_ms(decode_read_bytes: int, peak_bandwidth: float) -> float:
    """The shortest decode step: the weight bytes a step reads, once, at the peak bandwidth, in ms."""
    return A.decode_floor_ms(decode_read_bytes, peak_bandwidth)
