"""Each point's MFU, MBU and arithmetic intensity, and vLLM's FLOP counter against its own formulas.

Point quantities (report/registry.py): the measured rates (`tflops_s`, `read_gb_s`, series.py)
against the GPU's peaks (`peak_flops`, `peak_bandwidth`), the roofline by phase from the model
config at the lengths the sections model (`modelled_input_len`, `modelled_output_len`), and the
FLOP counter's increase between the quiet scrapes around the point against vLLM's formulas over
the requests that ran wholly between them (docs/analyses.md items 15, 17).
"""

from __future__ import annotations

from typing import Any, Mapping

from bundle.request_table import RequestTable
from report.architecture import roofline as RF
from report.derive import analyses as A
from report.derive import reconcile as R
from report.ledger import Absent
from report.registry import point_quantity


@point_quantity(unit="FLOP")
def flops_measured(tflops_s: float, quiet_scrapes: list, window_start: float, t_end: float) -> float:
    """Increase of vLLM's estimated FLOPs counter between the quiet scrapes that bracket the point (where it measured a FLOP rate)."""
    a, b = R.quiet_bracketing_window(quiet_scrapes, window_start, t_end)
    return R.estimated_counter_increase(quiet_scrapes, a, b, R.FLOPS)


@point_quantity(unit="FLOP")
def flops_predicted(tflops_s: float, model_config: Mapping[str, Any], quiet_scrapes: list,
                    all_requests: RequestTable, window_start: float, t_end: float) -> float:
    """vLLM's FLOPs formulas summed over the lifecycles of the requests that ran wholly between those scrapes."""
    a, b = R.quiet_bracketing_window(quiet_scrapes, window_start, t_end)
    inside = R.requests_inside_window(all_requests, *R.lifecycle_window(quiet_scrapes, a, b))
    if not inside:
        raise Absent("reason.no_request_in_counter_window")
    return R.predicted_flops(model_config, inside)


@point_quantity(unit="×")
def flops_ratio(flops_measured: float, flops_predicted: float) -> float:
    """vLLM's FLOP counter increase ÷ its formulas over the requests' lifecycles (1: fully explained)."""
    return R.estimator_ratio(flops_measured, flops_predicted)


@point_quantity(unit="FLOP/B")
def intensity(tflops_s: float, read_gb_s: float) -> float:
    """Measured arithmetic intensity: vLLM's FLOP rate ÷ its read-byte rate, time-averaged over the point."""
    return A.ratio(tflops_s, read_gb_s, scale=1e3)


@point_quantity(unit="fraction")
def mfu(tflops_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the measured TFLOP/s against the GPU's dense peak."""
    return A.scaled_ratio(tflops_s, peak_flops, 1e12)


@point_quantity(unit="fraction")
def mbu(read_gb_s: float, peak_bandwidth: float) -> float:
    """Memory bandwidth utilisation: the measured read GB/s against the GPU's peak bandwidth."""
    return A.scaled_ratio(read_gb_s, peak_bandwidth, 1e9)


@point_quantity(unit="FLOP/B")
def decode_intensity(model_config: Mapping[str, Any], server_running_median: float,
                     modelled_input_len: float, modelled_output_len: float) -> float:
    """FLOP per byte of one decode step of the median running requests at the mean decode context (roofline.py)."""
    return RF.model_decode_intensity(model_config, server_running_median, modelled_input_len, modelled_output_len)


@point_quantity(unit="FLOP/B")
def prefill_intensity(model_config: Mapping[str, Any], modelled_input_len: float) -> float:
    """FLOP per byte of one prompt's prefill that reads the weights once (roofline.py)."""
    return RF.model_prefill_intensity(model_config, modelled_input_len)
