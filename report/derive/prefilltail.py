"""The prefill step behind the ITL tail: the FLOP rate of one prompt's prefill run alone, and at
each point the engine step its fullest prefill makes at that rate, against ITL p99 and the mean step.

The rate is the round's own, measured at its valid closed-loop C=1 point (the raw inputs
`reference_input_len` and `reference_prefill_ms`, that point's), or the previous round's
(report/judge/compare.py): the point quantities read whichever rate the caller gives as the raw
input `prefill_flop_rate`, with `reference_clock_mhz` the SM clock it was measured at.
Each is a roofline or arith function declared with its parameters bound to the inputs it
reads (report/registry.py `bind`): the ledger records that function and its docstring.
"""

from __future__ import annotations

from report.architecture import roofline as RF
from report.derive import arith as A
from report.ledger import Value
from report.registry import bound_quantity

# The round's rate, from its C=1 point.
bound_quantity("round", "prefill_flop_rate", RF.prefill_flop_rate, unit="FLOP/s", config="model_config",
               input_len="reference_input_len", prefill_ms="reference_prefill_ms")
bound_quantity("round", "prefill_tflops_s", A.tera, unit="TFLOP/s", value="prefill_flop_rate")

# At each point measured to the end: the fullest prefill step at the rate, against ITL p99.
bound_quantity("point", "prefill_step_tokens", RF.largest_prefill_step_tokens, unit="tok",
               input_len="modelled_input_len", budget="step_token_budget")
bound_quantity("point", "itl_tail_ms_predicted", RF.prefill_step_ms, unit="ms", config="model_config",
               step_tokens="prefill_step_tokens", input_len="modelled_input_len", flop_rate="prefill_flop_rate")
bound_quantity("point", "itl_p99_over_tail", A.ratio, unit="×", numerator="itl_ms_p99",
               denominator="itl_tail_ms_predicted")
# The rate was measured at the reference point's clock; under a power cap this point ran slower.
bound_quantity("point", "itl_tail_ms_at_clock", RF.step_ms_at_clock, unit="ms", step_ms="itl_tail_ms_predicted",
               clock_mhz="sm_clock_load_mhz")
bound_quantity("point", "itl_p99_over_tail_at_clock", A.ratio, unit="×", numerator="itl_ms_p99",
               denominator="itl_tail_ms_at_clock")
# The mean step at the same rate, scaled to this point's clock: what a compute-bound verdict
# predicts from the rate this engine reached on a prompt alone.
bound_quantity("point", "step_ms_at_prefill_rate", RF.step_ms_at_flop_rate, unit="ms",
               flop_rate="prefill_flop_rate")
bound_quantity("point", "step_ms_at_prefill_rate_clock", RF.step_ms_at_clock, unit="ms",
               step_ms="step_ms_at_prefill_rate", clock_mhz="sm_clock_load_mhz")
bound_quantity("point", "step_over_prefill_rate", A.ratio, unit="×", numerator="step_ms_mean",
               denominator="step_ms_at_prefill_rate_clock")


def rate_reference_point(rate: Value) -> str:
    """The point a prefill RATE was measured at, as its `reference_prefill_ms` input names it ("?" where none does)."""
    parts = dict(rate.inputs).get("reference_prefill_ms", "").split(".")     # "p.<point>.prefill_ms_mean"
    return parts[1] if len(parts) > 2 else "?"
