"""Energy and cost at the answer: each point's tokens priced by the GPU-hour, and the SLO
capacity's throughput, energy and price, with the replicas a target load needs (docs/analyses.md
item 29).

The price and the target are the round's cost (bundle/cost.py: `--gpu-hour-price`, a plan's or
slo.toml's `[cost]`); without a price every priced quantity is absent with its reason, never 0.
A quantity at the capacity is interpolated, as the capacity is (report/judge/goodput.py),
linearly in log load between the two valid points that bracket it; its `_low` and `_high`
are its values at those two points, the bracket the capacity's own answer carries.
"""

from __future__ import annotations

import math

from bundle.cost import Cost
from report.derive import validity as V
from report.ledger import Absent
from report.registry import bound_quantity, point_quantity, require_points, round_quantity

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6


def _price(cost: Cost) -> float:
    if cost.gpu_hour_price is None:
        raise Absent("reason.no_gpu_hour_price")
    return cost.gpu_hour_price


def usd_per_million(gpu_hour_price: float, gpus: int, tok_s: float) -> float:
    """Dollars per million tokens of a replica of GPUS GPUs at TOK_S tokens per second, at GPU_HOUR_PRICE a GPU-hour."""
    if tok_s <= 0:
        raise Absent("reason.no_token_in_window")
    return gpu_hour_price * gpus / (SECONDS_PER_HOUR * tok_s) * PER_MILLION


# ---------------------------------------------------------------- each point

@point_quantity(unit="GPU", first_present=True)
def gpus_per_replica(gpus_sampled: int | None = None, tensor_parallel_size: int | None = None) -> int:
    """The GPUs one replica (the engine measured) takes: those sampled in the window, else its launch command's tensor-parallel size."""
    found = gpus_sampled if gpus_sampled is not None else tensor_parallel_size
    if not found:
        raise Absent("reason.gpus_per_replica_unknown")
    return int(found)


@point_quantity(unit="$/Mtok")
def usd_per_m_output_tokens(cost: Cost, gpus_per_replica: int, output_tok_s: float) -> float:
    """Dollars per million output tokens at the point: the replica's GPU-hours over the output tokens it made in an hour."""
    return usd_per_million(_price(cost), gpus_per_replica, output_tok_s)


@point_quantity(unit="$/Mtok")
def usd_per_m_total_tokens(cost: Cost, gpus_per_replica: int, total_tok_s: float) -> float:
    """Dollars per million tokens processed at the point, prompt and output: the replica's GPU-hours over the tokens it processed in an hour."""
    return usd_per_million(_price(cost), gpus_per_replica, total_tok_s)


# ---------------------------------------------------------------- the round: the price, the target

@round_quantity(unit="$/GPU·h")
def gpu_hour_price(cost: Cost) -> float:
    """The price of one GPU for one hour the round is costed at (US dollars)."""
    return _price(cost)


@round_quantity(unit="req/s")
def target_req_s(cost: Cost) -> float:
    """The requests per second a deployment must serve, as the cost states it."""
    if cost.target_req_s is None:
        raise Absent("reason.no_target_load")
    return cost.target_req_s


@round_quantity(unit="tok/s")
def target_tok_s(cost: Cost) -> float:
    """The output tokens per second a deployment must serve, as the cost states it."""
    if cost.target_tok_s is None:
        raise Absent("reason.no_target_load")
    return cost.target_tok_s


@round_quantity(unit="GPU")
def replica_gpus(each_gpus_per_replica: list) -> int:
    """The GPUs one replica takes over the valid points (the most any point sampled)."""
    found = [g for g in each_gpus_per_replica if g is not None]
    if not found:
        require_points(each_gpus_per_replica, range(len(each_gpus_per_replica)), "gpus_per_replica")
        raise Absent("reason.gpus_per_replica_unknown")
    return max(found)


# ---------------------------------------------------------------- at the SLO capacity

def bracket_index(loads: list[float], load: float) -> int:
    """The index of LOAD among the valid points' LOADS (a capacity's bracket is two measured loads)."""
    for i, x in enumerate(loads):
        if math.isclose(x, load):
            return i
    raise Absent("reason.input_none", input="slo_capacity_low")


def at_capacity(loads: list[float], values: list, capacity: float, low: float, high: float) -> float:
    """A point quantity at the SLO capacity: its values at the two measured loads that bracket the capacity, interpolated linearly in log load (VALUES one per valid point, in load order)."""
    i, j = bracket_index(loads, low), bracket_index(loads, high)
    require_points(values, (i, j), "value")
    if high == low:
        return values[i]
    t = (math.log(capacity) - math.log(low)) / (math.log(high) - math.log(low))
    return values[i] + t * (values[j] - values[i])


def at_load(loads: list[float], values: list, load: float) -> float:
    """A point quantity at the measured load just below or just above the SLO capacity: that point's own value (VALUES one per valid point, in load order)."""
    i = bracket_index(loads, load)
    require_points(values, (i,), "value")
    return values[i]


# Each point quantity at the SLO capacity (`capacity_<name>`), and where it has them at the
# measured loads below and above it (`capacity_<name>_low`: the last that meets the SLO,
# `_high`: the first that misses it): one declaration per quantity and bound.
AT_CAPACITY = (("output_tok_s", "tok/s", True), ("total_tok_s", "tok/s", False), ("req_s", "req/s", True),
               ("joules_per_token", "J/tok", False), ("joules_per_total_token", "J/tok", False))
for _name, _unit, _bounds in AT_CAPACITY:
    bound_quantity("round", f"capacity_{_name}", at_capacity, unit=_unit, values=f"each_{_name}",
                   capacity="slo_capacity", low="slo_capacity_low", high="slo_capacity_high")
    if _bounds:
        for _side in ("low", "high"):
            bound_quantity("round", f"capacity_{_name}_{_side}", at_load, unit=_unit, values=f"each_{_name}",
                           load=f"slo_capacity_{_side}")


@round_quantity(unit="$/Mtok")
def capacity_usd_per_m_output_tokens(gpu_hour_price: float, replica_gpus: int, capacity_output_tok_s: float) -> float:
    """Dollars per million output tokens at the SLO capacity: a replica's GPU-hours over the output tokens it makes there in an hour."""
    return usd_per_million(gpu_hour_price, replica_gpus, capacity_output_tok_s)


@round_quantity(unit="$/Mtok")
def capacity_usd_per_m_total_tokens(gpu_hour_price: float, replica_gpus: int, capacity_total_tok_s: float) -> float:
    """Dollars per million tokens processed at the SLO capacity, prompt and output."""
    return usd_per_million(gpu_hour_price, replica_gpus, capacity_total_tok_s)


# ---------------------------------------------------------------- replicas for a target load

def replicas_needed(target: float, per_replica: float) -> int:
    """Replicas that carry TARGET at PER_REPLICA each: the whole number at or above their ratio."""
    if per_replica <= 0:
        raise Absent("reason.denominator_zero")
    return max(1, math.ceil(target / per_replica - V.ROUNDOFF))


def _replicas(target_req_s, target_tok_s, req_s, tok_s) -> int:
    """The replicas the target needs: by requests per second where it names them, else by output tokens."""
    if target_req_s is not None:
        return replicas_needed(target_req_s, req_s)
    if target_tok_s is not None:
        return replicas_needed(target_tok_s, tok_s)
    raise Absent("reason.no_target_load")


@round_quantity(unit="replica")
def replicas_for_target(capacity_req_s: float, capacity_output_tok_s: float, target_req_s: float | None = None,
                        target_tok_s: float | None = None) -> int:
    """Replicas the target load needs at the SLO capacity per replica (by requests per second where the target names them, else by output tokens)."""
    return _replicas(target_req_s, target_tok_s, capacity_req_s, capacity_output_tok_s)


@round_quantity(unit="replica")
def replicas_for_target_low(capacity_req_s_high: float, capacity_output_tok_s_high: float,
                            target_req_s: float | None = None, target_tok_s: float | None = None) -> int:
    """The fewest replicas the target could need: at the throughput of the measured load above the capacity (the capacity lies below it)."""
    return _replicas(target_req_s, target_tok_s, capacity_req_s_high, capacity_output_tok_s_high)


@round_quantity(unit="replica")
def replicas_for_target_high(capacity_req_s_low: float, capacity_output_tok_s_low: float,
                             target_req_s: float | None = None, target_tok_s: float | None = None) -> int:
    """The most replicas the target could need: at the throughput of the measured load below the capacity, which meets the SLO."""
    return _replicas(target_req_s, target_tok_s, capacity_req_s_low, capacity_output_tok_s_low)


@round_quantity(unit="GPU")
def gpus_for_target(replicas_for_target: int, replica_gpus: int) -> int:
    """GPUs the target load needs: its replicas times the GPUs one takes."""
    return replicas_for_target * replica_gpus


@round_quantity(unit="GPU")
def gpus_for_target_low(replicas_for_target_low: int, replica_gpus: int) -> int:
    """The fewest GPUs the target could need (the lower replica count)."""
    return replicas_for_target_low * replica_gpus


@round_quantity(unit="GPU")
def gpus_for_target_high(replicas_for_target_high: int, replica_gpus: int) -> int:
    """The most GPUs the target could need (the upper replica count)."""
    return replicas_for_target_high * replica_gpus
