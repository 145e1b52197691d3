"""The typed report object that every renderer (HTML, PDF, both languages) reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from report.ledger import Ledger


@dataclass
class Figure:
    """One chart: a Vega-Lite spec per language (titles and axes translated)."""

    id: str
    specs: dict[str, dict[str, Any]]          # lang -> Vega-Lite JSON (altair Chart.to_dict())
    title: dict[str, str]                     # lang -> title
    caption: dict[str, str] = field(default_factory=dict)  # lang -> caption, citing [[key]] (say)
    keys: tuple[str, ...] = ()                # ledger keys the figure plots, for provenance


@dataclass
class Column:
    """A table column: its header per language, the unit, and how many decimals to print."""

    id: str
    header: dict[str, str]
    unit: str = ""
    digits: int | None = None


@dataclass
class Table:
    """A table whose every numeric cell is a ledger key (None where the row has no value)."""

    id: str
    title: dict[str, str]
    columns: list[Column]
    rows: list[list[str | None]]              # each cell: a ledger key, or None for an empty cell
    row_labels: list[dict[str, str]] = field(default_factory=list)  # lang -> label per row


@dataclass(frozen=True)
class RoundFacts:
    """The round's non-numeric facts the narrative reads (engine, model, hardware, which points
    are valid, the findings), built once by compose and never changed after. Every number is a
    ledger value; a float here is a policy threshold a template compares a value against."""

    # The bundle and its engine, model and hosts (compose.facts_of).
    bundle: str = ""
    status: str | None = None
    status_reason: str | None = None
    origin: str | None = None
    engine_mode: str | None = None
    engine_mode_text: dict[str, str] = field(default_factory=dict)
    engine: str | None = None                  # a hand-built fixture's engine line
    vllm_version: str | None = None
    model: str | None = None
    model_desc: str | None = None
    # lang -> the plan's own title as written, where the page has no subtitle in its language
    plan_title_written: dict[str, str] = field(default_factory=dict)
    random_weights: bool = False
    cpu: str | None = None
    gpu: str | None = None
    gpu_absent_reason: str | None = None
    kv_pool_device: str | None = None          # where the server log puts the KV cache ("CPU", "GPU")
    gpu_absent_reason_zh: str | None = None
    axis: str = "single"                       # the narrative's axis ("single" under two valid points)
    sweep_axis: str = "single"                 # the setting that varies across the points
    created: str | None = None
    tool_version: str | None = None
    git_revision: str | None = None
    server_flags: str | None = None
    prefix_caching: bool | None = None         # as the server log's arguments say; None: not said
    cuda_graphs: bool | None = None
    prefix_caching_off: bool = False
    lengths_vary: bool = False                 # each request brought lengths of its own
    mfu_enabled: bool = False
    warnings: list[str] = field(default_factory=list)
    # A replayed trace or dataset (the manifest's workload_source): kind, path, format and the
    # reasons the loader left requests out; its counts are ledger values (r.source_*).
    source_kind: str | None = None
    source_path: str | None = None
    source_format: str | None = None
    source_drop_reasons: list[str] = field(default_factory=list)
    # The points, by what happened to them and what they showed.
    points: list[str] = field(default_factory=list)
    failed_points: list[str] = field(default_factory=list)
    interrupted_points: list[str] = field(default_factory=list)
    ok_points: list[str] = field(default_factory=list)
    valid_points: list[str] = field(default_factory=list)
    invalid_points: dict[str, list[str]] = field(default_factory=dict)
    headline_point: str | None = None          # the point the "at C=…" sentences speak of
    first_point: str | None = None
    crossover_from: str | None = None          # the second-highest valid point (the crossover's slopes)
    point_labels: dict[str, str] = field(default_factory=dict)
    bottlenecks: dict[str, str] = field(default_factory=dict)
    demand_over_pool: list[str] = field(default_factory=list)
    client_distorted_points: list[str] = field(default_factory=list)
    node_table: bool = False                   # a Ray round: the client section's table of its nodes
    # The relations the templates choose their words by (report/publish/predicates.py): name ->
    # whether it holds. A template compares no numbers itself.
    holds: dict[str, bool] = field(default_factory=dict)
    # The GPU's peaks as the spec table names them, or why there are none.
    peak_label: dict[str, str] | None = None   # which peak, in each language
    peak_missing: str | None = None
    peak_missing_zh: str | None = None
    # The previous round (judge.compare): what differs, which points are shared.
    has_prev: bool = False
    prev_round: str | None = None
    prev_differs: dict[str, list[str]] = field(default_factory=dict)   # language -> what differs
    common_points: list[str] = field(default_factory=list)
    comparable: bool = False
    repro_points: int = 0
    prefill_ref_point: str | None = None
    # The clock key of the previous round's C=1 point whose prefill rate stands for this round's.
    prefill_ref_clock: str | None = None
    occupancy_point: str | None = None
    verdicts_confirmed: list[tuple[str, str]] = field(default_factory=list)        # (point, bottleneck)
    verdicts_corrected: list[tuple[str, str, str]] = field(default_factory=list)   # (point, before, now)
    verdicts_new: list[str] = field(default_factory=list)                          # bottlenecks
    # What the judge concluded, and the figures placed.
    findings: list[dict[str, Any]] = field(default_factory=list)
    slo_source: str = ""                       # where the SLO was stated (slo.toml, plan, --slo)
    # A round of server sets: each set's point against the base's (report/judge/sets.py).
    set_comparisons: list[dict[str, Any]] = field(default_factory=list)
    next_steps: list[dict[str, Any]] = field(default_factory=list)
    # Other tools' results (report/judge/peer_gaps.py): each beside the point it ran (point, item,
    # tool, file), and those no point ran (tool, file).
    peer_matches: list[dict[str, Any]] = field(default_factory=list)
    peers_unmatched: list[dict[str, Any]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    # Each request brought its own lengths (a trace, a dataset, sessions, drawn lengths).
    lengths_vary: bool = False
    # Page 1's first sentence (what limits the server, from which load) and the rest of the
    # thesis after it, per language (compose.headline).
    headline: dict[str, list[str]] = field(default_factory=dict)
    # The capacity under the SLO and its measured bracket are all present: page 1 cards them.
    capacity_card: bool = False
    # What the round leaves unanswered, one line each in place of a section with nothing to
    # report (compose.not_measured): "slo", "compare_first", "compare_differs", "kv_small", ...
    not_measured: list[str] = field(default_factory=list)


@dataclass
class RoundReport:
    """Everything needed to render one round: ledger, figures, tables, narrative sections."""

    round_id: str                             # e.g. "round-2"
    title: dict[str, str]                     # lang -> title
    ledger: Ledger
    sections: list[str]                       # section template names, in reading order
    figures: dict[str, Figure] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    facts: RoundFacts = field(default_factory=RoundFacts)   # non-numeric facts, built once
    notices: list[dict[str, str]] = field(default_factory=list)  # lang -> text, e.g. incomplete
    bundles: list[str] = field(default_factory=list)      # bundle paths the report read
    subtitle: dict[str, str] = field(default_factory=dict)   # lang -> the plan's own title, quoted
