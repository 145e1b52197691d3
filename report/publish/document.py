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
    caption: dict[str, str] = field(default_factory=dict)  # lang -> caption (may hold n() markup)
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


@dataclass
class RoundReport:
    """Everything needed to render one round: ledger, figures, tables, narrative sections."""

    round_id: str                             # e.g. "round-2"
    title: dict[str, str]                     # lang -> title
    ledger: Ledger
    sections: list[str]                       # section template names, in reading order
    figures: dict[str, Figure] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)   # non-numeric facts (engine, model, host)
    notices: list[dict[str, str]] = field(default_factory=list)  # lang -> text, e.g. incomplete
    bundles: list[str] = field(default_factory=list)      # bundle paths the report read
