"""Whether a point measured what it was set to measure: the signals behind its validity.

Each is a pure function named for what it returns. A point is valid when the server held
the set concurrency, the streams did not run in lockstep waves, the window covered several
request lifetimes, the server's /metrics answered, and the client's timing error stayed
small against the ITL. The thresholds are policy, stated once here and printed with every
verdict.
"""

from __future__ import annotations

import numpy as np
from serving_ledger.bundle.request_table import RequestTable, as_request_table
from serving_ledger.report import series
from serving_ledger.report.ledger import Absent

# The server "held" the point when running + waiting averaged at least this share of C.
HELD_MIN = 0.9
# Send times within this share of the median request lifetime count as "together".
SYNC_EPS = 0.05
# Lockstep: a request's send is, on average, together with more than this share of the
# other streams' sends (uniform phases give about 2 * SYNC_EPS = 0.1).
SYNC_MAX = 0.5
# Steady state: the window covers at least this many median request lifetimes.
LIFETIMES_MIN = 3.0
# More than this share of the window's /metrics scrapes failed: the server-side numbers of
# the point rest on too few samples.
SCRAPE_FAIL_MAX = 0.2
# The client's timing error counts as distortion above this share of the ITL median.
CLIENT_ERROR_MAX = 0.1
# The seeds accept a measured ITL slope within this range of the KV-bandwidth theory.
ITL_SLOPE_AGREES = (0.8, 1.2)
# Two rounds reproduce when output throughput at their common points differs by at most this.
REPRO_TPUT_TOL = 0.05
# Throughput that grew less than this between the last two valid points has saturated.
SATURATION_GROWTH = 0.10


def held_concurrency_fraction(scrapes: list, t_start: float, t_end: float,
                              concurrency: int) -> float:
    """Mean over the window's scrapes of min(1, (running + waiting) / C): the share of the set concurrency the server held."""
    if not concurrency:
        raise Absent("reason.no_concurrency")
    running = series.gauge_series(scrapes, t_start, t_end, "vllm:num_requests_running")
    waiting = dict(series.gauge_series(scrapes, t_start, t_end, "vllm:num_requests_waiting"))
    held = [min(1.0, (r + waiting.get(t, 0.0)) / concurrency) for t, r in running]
    return float(np.mean(held))


def send_synchrony(requests: RequestTable, concurrency: int) -> float:
    """Mean share of the other streams whose request was sent within ±5 % of the median request lifetime of each request's send."""
    if not concurrency or concurrency < 2:
        raise Absent("reason.single_stream")
    reqs = as_request_table(requests)
    sends = np.sort(reqs.col("t_send"))
    sends = sends[~np.isnan(sends)]
    ends = reqs.col("t_end")
    life = ends - reqs.col("t_send")
    life = life[~np.isnan(life)]
    if len(sends) < 2 * concurrency or not len(life):
        raise Absent("reason.few_requests_per_stream", n=len(sends), concurrency=concurrency)
    eps = SYNC_EPS * float(np.median(life))
    lo = np.searchsorted(sends, sends - eps)
    hi = np.searchsorted(sends, sends + eps, side="right")
    return float(np.mean(hi - lo - 1)) / (concurrency - 1)


def lifetimes_in_window(window_s: float, e2e_ms_p50: float) -> float:
    """How many median request lifetimes the window covers: window ÷ E2E p50."""
    if e2e_ms_p50 <= 0:
        raise Absent("reason.lifetime_zero")
    return window_s * 1e3 / e2e_ms_p50


def failed_scrape_share(scrapes: list, t_start: float, t_end: float) -> float:
    """Failed /metrics scrapes as a share of the scrapes attempted inside the window."""
    tried = series.scrape_count(scrapes, t_start, t_end)
    if not tried:
        raise Absent("reason.no_scrape_attempted")
    return series.failed_scrape_count(scrapes, t_start, t_end) / tried
