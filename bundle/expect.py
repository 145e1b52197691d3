"""A plan's [expect] table: the verdicts its construction forces, point by point.

It travels in the bundle's manifest (`plan.expect`) and beside it in the run's plan.toml; the
collector checks it with the plan, the report's conformance check holds the verdicts to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bundle.schema import point_id
from bundle.textfile import read_toml_file

# A plan file is at most this large (bench/plan/parse.py reads it with the same bound).
MAX_PLAN_FILE_BYTES = 1 << 20


class ExpectError(ValueError):
    """An [expect] table that is not a table of point ids to known keys."""


def _what(types: tuple[type, ...]) -> str:
    return {str: "a string", list: "a list", bool: "true/false"}[types[0]]


# [expect."<point id>"]: bottleneck = the verdict the forced cause must get; not = verdicts the
# point must not get (the rule that must stay silent); invalid = validity checks that must
# fail; valid = whether the point must pass every check; why = the construction, in words;
# holdout = true for a case kept out of tuning the rules, checked only at the end (the
# conformance table reports it apart).
EXPECT_KEYS: dict[str, tuple[type, ...]] = {"bottleneck": (str,), "not": (list,),
                                            "invalid": (list,), "valid": (bool,), "why": (str,),
                                            "holdout": (bool,)}


def expect_from_dict(data: Any, source: str) -> dict[str, dict[str, Any]]:
    """A plan's [expect] table, checked: point ids to the verdicts forced by construction."""
    if not isinstance(data, dict):
        raise ExpectError(f"{source}: [expect] must be a table of point ids")
    for pid, table in data.items():
        where = f"{source} [expect.{pid}]"
        if not point_id(pid):
            raise ExpectError(f"{source} [expect]: {pid!r:.70} is not a point id (letters, digits "
                              "and .+- as the collector makes them)")
        if not isinstance(table, dict):
            raise ExpectError(f"{where}: must be a table")
        unknown = set(table) - set(EXPECT_KEYS)
        if unknown:
            raise ExpectError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(EXPECT_KEYS)}")
        for key, value in table.items():
            if not isinstance(value, EXPECT_KEYS[key]):
                raise ExpectError(f"{where}.{key}: expected {_what(EXPECT_KEYS[key])}, got {value!r}")
            if isinstance(value, list) and not all(isinstance(x, str) for x in value):
                raise ExpectError(f"{where}.{key}: every entry must be a string, got {value!r}")
    return {str(k): dict(v) for k, v in data.items()}


def expect_of_plan_file(path: Path, source: str | None = None) -> dict[str, dict[str, Any]]:
    """The [expect] table of the plan file at PATH (empty when it has none)."""
    data = read_toml_file(path, source or str(path), MAX_PLAN_FILE_BYTES, ExpectError)
    return expect_from_dict(data.get("expect", {}), source or str(path))
