"""The search sweep's verdict on a point while it runs: whether its requests so far meet the SLO.

Not a ledger quantity: the collector asks it between points (serving_ledger/cli.py hands it to
bench's sweep as its judge); the report judges each point later, from the whole bundle, with
goodput.py's quantities, which this reads the objectives through.
"""

from __future__ import annotations

from pathlib import Path

from bundle.request_table.fileread import read_request_files
from bundle.slo import slo_from_dict
from bundle.store.streams import shard_streams
from report.derive.stats import requests as ST
from report.judge.goodput import (
    slo_e2e_ms,
    slo_itl_ms,
    slo_margin_e2e,
    slo_margin_itl,
    slo_margin_tpot,
    slo_margin_ttft,
    slo_tpot_ms,
    slo_ttft_ms,
)
from report.ledger import Absent


def point_meets_slo(bundle_dir: Path, point_id: str, slo_table: dict) -> bool:
    """Whether a point's measured requests, as the bundle holds them so far, meet every
    objective of SLO_TABLE at its percentile: the search sweep's verdict while it runs (the
    report judges the point's validity later, from the whole bundle)."""
    d = Path(bundle_dir)
    files = [d / f"{s}.jsonl" for s in ["requests"] + shard_streams(d)]
    table = read_request_files([f for f in files if f.exists()], [])
    measured = ST.measured(table.take(table.point_is(point_id)))
    slo = slo_from_dict(slo_table, f"{d}/manifest.json: plan.slo")
    margins = []
    for _, value, margin in ((k, v, m) for k, v, m in (
            ("ttft_ms", slo_ttft_ms, slo_margin_ttft), ("tpot_ms", slo_tpot_ms, slo_margin_tpot),
            ("e2e_ms", slo_e2e_ms, slo_margin_e2e), ("itl_ms", slo_itl_ms, slo_margin_itl))
            if getattr(slo, k) is not None):
        try:
            margins.append(margin(value(measured, slo), slo))
        except Absent:
            return False            # an objective that cannot be measured is not met
    return bool(margins) and all(m >= 0 for m in margins)
