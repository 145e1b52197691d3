"""The engine's own timings against the client's: what delivery (API server, network, client) adds.

vLLM 0.24's definitions (vllm/v1/metrics/stats.py): `inter_token_latency_seconds` is the
gap between two engine-core output timestamps of one request; `request_time_per_output_token_seconds`
is a finished request's (last − first engine-core token timestamp) / (tokens − 1);
`time_to_first_token_seconds` runs from the request's arrival in the API server's engine
client to the frontend's processing of the iteration that carried its first token. So the
first two are the engine core's pace, before the API server detokenises and streams; the
client's per-token gaps include everything after it.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.series import scrapes as S
from report.ledger import Absent
from report.registry import point_quantity

ENGINE_ITL = "vllm:inter_token_latency_seconds"
ENGINE_TTFT = "vllm:time_to_first_token_seconds"
ENGINE_TPOT = "vllm:request_time_per_output_token_seconds"
QUEUE = "vllm:request_queue_time_seconds"
ITERATION_TOKENS = "vllm:iteration_tokens_total"


@point_quantity(unit="ms")
def engine_itl_ms_mean(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Mean gap between a request's engine-core output timestamps: Δsum/Δcount of inter_token_latency_seconds, ms."""
    return 1e3 * S.histogram_window_mean(scrapes, bracket_start, bracket_end, ENGINE_ITL)


@point_quantity(unit="ms")
def engine_ttft_ms_mean(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Mean time from arrival in the engine client to the first token's iteration: Δsum/Δcount of time_to_first_token_seconds, ms."""
    return 1e3 * S.histogram_window_mean(population_scrapes, population_start, population_end, ENGINE_TTFT)


@point_quantity(unit="ms")
def engine_tpot_ms_mean(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Mean per-request engine decode pace, (last − first token) ÷ (tokens − 1): Δsum/Δcount of request_time_per_output_token_seconds, ms."""
    return 1e3 * S.histogram_window_mean(population_scrapes, population_start, population_end, ENGINE_TPOT)


@point_quantity(unit="step/s")
def engine_steps_per_s(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Engine steps per second: Δcount of iteration_tokens_total over the window."""
    if bracket_end <= bracket_start:
        raise Absent("reason.window_empty")
    delta = S.histogram_increase(scrapes, bracket_start, bracket_end, ITERATION_TOKENS)
    return delta.count / (bracket_end - bracket_start)


@point_quantity(unit="engine")
def engines_stepping(scrapes: list, bracket_start: float, bracket_end: float) -> int:
    """Engines (endpoint and data-parallel rank) whose step histogram, iteration_tokens_total, the point's scrapes carry."""
    from report.derive.load.engines import engines_of
    found = engines_of(scrapes, bracket_start, bracket_end, ITERATION_TOKENS + "_count")
    if not found:
        raise Absent("reason.no_step_histogram", metric=ITERATION_TOKENS)
    return len(found)


@point_quantity(unit="ms")
def client_itl_ms_mean(measured: RequestTable) -> float:
    """Mean gap per output token as the client received it (a chunk of k tokens gives k equal gaps), ms."""
    from report.derive.stats.samples import itl_gaps_ms
    gaps = itl_gaps_ms(as_request_table(measured))
    if not len(gaps):
        raise Absent("reason.no_two_chunks")
    return float(np.mean(gaps))


@point_quantity(unit="ms")
def delivery_itl_ms(client_itl_ms_mean: float, engine_itl_ms_mean: float) -> float:
    """What delivery adds to each token's gap: the client's mean ITL less the engine's."""
    return client_itl_ms_mean - engine_itl_ms_mean


@point_quantity(unit="ms")
def client_tpot_ms_mean(population: RequestTable) -> float:
    """Mean TPOT, as the client measured it, of the requests the engine's histograms count."""
    from report.derive.stats.samples import mean, tpots_ms
    return mean(tpots_ms(population))


@point_quantity(unit="×")
def delivery_tpot_ratio(client_tpot_ms_mean: float, engine_tpot_ms_mean: float) -> float:
    """The client's mean TPOT over the engine's, over the same finished requests."""
    from report.derive.arith import ratio
    return ratio(client_tpot_ms_mean, engine_tpot_ms_mean)


@point_quantity(unit="ms")
def client_ttft_ms_mean_first_in_window(first_in_population: RequestTable) -> float:
    """Mean TTFT, as the client measured it, of the requests whose first token the engine's TTFT histogram counts."""
    from report.derive.stats.samples import mean, ttfts_ms
    return mean(ttfts_ms(first_in_population))


@point_quantity(unit="ms")
def delivery_ttft_ms(client_ttft_ms_mean_first_in_window: float, engine_ttft_ms_mean: float) -> float:
    """What delivery adds to the first token: the client's mean TTFT less the engine's, same requests."""
    return client_ttft_ms_mean_first_in_window - engine_ttft_ms_mean


def last_warmup_end(requests: RequestTable) -> float:
    """When the point's last warm-up request ended (client time)."""
    reqs = as_request_table(requests)
    warm = reqs.col("warmup").astype(bool)
    ends = reqs.col("t_end")[warm]
    ends = ends[~np.isnan(ends)]
    if not len(ends):
        raise Absent("reason.no_warmup")
    return float(np.max(ends))


def population_window(scrapes: list, t_after: float, t_end: float) -> tuple[float, float]:
    """The first successful scrape at or after T_AFTER and the first at or after T_END: a histogram window every finish of which is a measured request."""
    ok = [s["t"] for s in scrapes if s.get("ok")]
    start = next((t for t in ok if t >= t_after), None)
    end = next((t for t in ok if t >= t_end), None)
    if start is None or end is None or end <= start:
        raise Absent("reason.no_scrapes_bracket")
    return start, end


def requests_ended_between(requests: RequestTable, t_start: float, t_end: float) -> RequestTable:
    """The requests whose last byte arrived in (T_START, T_END]."""
    reqs = as_request_table(requests)
    ends = reqs.col("t_end")
    return reqs.take((ends > t_start) & (ends <= t_end))


def requests_first_token_between(requests: RequestTable, t_start: float,
                                 t_end: float) -> RequestTable:
    """The requests whose first token arrived in (T_START, T_END]."""
    reqs = as_request_table(requests)
    first = reqs.col("t_first")
    return reqs.take((first > t_start) & (first <= t_end))


def server_finished_count(scrapes: list, t_start: float, t_end: float) -> float:
    """Requests the server finished in the window: Δcount of request_queue_time_seconds."""
    return S.histogram_increase(scrapes, t_start, t_end, QUEUE).count


@point_quantity(unit="")
def population_excludes_warmup(scrapes: list, population_after_warmup: bool) -> bool:
    """Whether a scrape fell between the last warm-up request's end and the point's end, so the server's finish-time histograms could leave the warm-up out."""
    if not any(s.get("ok") for s in scrapes):
        raise Absent("reason.no_scrape_no_histogram_window")
    return population_after_warmup


@point_quantity(unit="req")
def warmup_ended_in_point_window(warmup_requests: RequestTable, bracket_window: tuple[float, float]) -> int:
    """Warm-up requests that ended inside the scrapes bracketing the point's window (their finishes the server counts there)."""
    return len(requests_ended_between(warmup_requests, *bracket_window))


@point_quantity(unit="req")
def population_requests_client(population: RequestTable) -> int:
    """Requests of the population as the client counts them: answered, ended inside the histogram window."""
    return len(population)


@point_quantity(unit="req")
def population_requests_server(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Requests the server finished inside the population's histogram window."""
    return server_finished_count(population_scrapes, population_start, population_end)


@point_quantity(unit="fraction")
def population_mismatch(population_requests_server: float, population_requests_client: int) -> float:
    """How far the server's count of the population is from the client's, as a fraction of the client's."""
    from report.derive.arith import relative_difference
    return relative_difference(population_requests_server, population_requests_client)
