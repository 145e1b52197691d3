"""Generic arithmetic the quantities share: parts and ratios, differences, extremes, units and a line through points.

Each is a pure function named for what it returns, with a one-line docstring that the report
shows as its description where a quantity is declared with it (`bound_quantity`,
`cross_quantity`, `Ledger.derive`). Missing or degenerate inputs raise Absent with a reason.
"""

from __future__ import annotations

import math
from typing import Sequence

from report.ledger import Absent


def share(part: float, whole: float) -> float:
    """A part as a fraction of its whole."""
    if whole == 0:
        raise Absent("reason.whole_zero")
    return part / whole


def ratio(numerator: float, denominator: float, scale: float = 1.0) -> float:
    """One quantity divided by another (times a unit scale)."""
    if denominator == 0:
        raise Absent("reason.denominator_zero")
    return numerator / denominator * scale


def product(a: float, b: float) -> float:
    """a times b."""
    return a * b


def difference(a: float, b: float) -> float:
    """a minus b."""
    return a - b


def relative_difference(new: float, old: float) -> float:
    """Relative change from OLD to NEW, as a fraction of OLD."""
    if old == 0:
        raise Absent("reason.reference_zero")
    return (new - old) / old


def percentage_point_error(measured: float, expected: float) -> float:
    """Measured minus expected, both fractions, in percentage points."""
    return 100.0 * (measured - expected)


def minimum(values: list) -> float:
    """The smallest of a list of values."""
    if not values:
        raise Absent("reason.no_values")
    return min(values)


def maximum(values: list) -> float:
    """The largest of a list of values."""
    if not values:
        raise Absent("reason.no_values")
    return max(values)


def running_max(value: float, envelope: float | None = None) -> float:
    """The monotone envelope from below: the larger of this value and the envelope so far."""
    return value if envelope is None else max(value, envelope)


def identity_of(value: float) -> float:
    """The same value under another name: carried over from another round, or the source chosen."""
    return value


def giga(value: float) -> float:
    """A value in units of 10^9."""
    return value / 1e9


def tera(value: float) -> float:
    """A value in units of 10^12."""
    return value / 1e12


def interpolate(x: float, xs: list, ys: list) -> float:
    """Linear interpolation of y at x between measured (xs, ys) points, xs ascending."""
    if len(xs) < 2 or not xs[0] <= x <= xs[-1]:
        raise Absent("reason.outside_range_no_extrapolation")
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise Absent("reason.outside_range")


def loglog_slope(x1: float, y1: float, x2: float, y2: float) -> float:
    """Slope of log y against log x between two points (the local power-law exponent)."""
    if min(x1, y1, x2, y2) <= 0:
        raise Absent("reason.log_of_nonpositive")
    if x1 == x2:
        raise Absent("reason.points_share_x")
    return math.log(y2 / y1) / math.log(x2 / x1)


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) != len(ys) or len(xs) < 2:
        raise Absent("reason.fit_two_points")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise Absent("reason.x_all_equal")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return slope, intercept, r2


def fit_slope(xs: list, ys: list) -> float:
    """Least-squares slope of y on x."""
    return _fit(xs, ys)[0]


def fit_intercept(xs: list, ys: list) -> float:
    """Least-squares intercept of y on x."""
    return _fit(xs, ys)[1]


def fit_r_squared(xs: list, ys: list) -> float:
    """Coefficient of determination R² of the least-squares line of y on x."""
    if len(xs) < 3:
        raise Absent("reason.r2_two_points")
    return _fit(xs, ys)[2]
