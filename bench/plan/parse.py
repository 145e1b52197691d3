"""Reading a plan: its file, its keys' types, its tables built strictly, then checked."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from bench import replay
from bench.plan.checks import check_plan
from bench.plan.spec import SECTIONS, TOP_KEYS, Plan
from bench.prompts import (
    PlanError,
)
from bundle.cost import CostError, cost_from_dict
from bundle.expect import MAX_PLAN_FILE_BYTES, ExpectError, expect_from_dict
from bundle.schema import TITLE_LANGS
from bundle.slo import SloError, slo_from_dict
from bundle.textfile import read_toml_file


def _build(cls, data: dict[str, Any], where: str):
    names = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
    obj = cls()
    for k, v in data.items():
        default = getattr(obj, k)
        if isinstance(default, bool) and not isinstance(v, bool):
            raise PlanError(f"{where}.{k}: expected true/false, got {v!r}")
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise PlanError(f"{where}.{k}: expected a number, got {v!r}")
            if not math.isfinite(v):
                raise PlanError(f"{where}.{k}: expected a finite number, got {v!r}")
            if isinstance(default, int) and not isinstance(v, int):
                raise PlanError(f"{where}.{k}: expected a whole number, got {v!r}")
        if isinstance(default, list) and not isinstance(v, list):
            raise PlanError(f"{where}.{k}: expected a list, got {v!r}")
        setattr(obj, k, v)
    return obj


# The element types of a plan's list and table keys; _build checks scalars and that a list is
# a list, check_plan_types the rest, so a wrong element ("input_len = ['a']") fails here.
ELEMENT_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("engine", "flags"): (str,), ("engine", "env"): (str,),
    ("engine", "endpoints"): (str,), ("engine", "commands"): (str,),
    ("sweep", "concurrency"): (int,), ("sweep", "input_len"): (int,),
    ("sweep", "request_rate"): (int, float), ("sweep", "server_flags"): (list,),
    ("client", "cpu_affinity"): (int,),
}
TOP_TYPES: dict[str, tuple[type, ...]] = {"id": (str,), "seed": (int,)}


def check_title(title: Any, path: str) -> None:
    """Refuse a title that is neither a string nor a table of strings by language (TITLE_LANGS)."""
    if isinstance(title, str):
        return
    if not isinstance(title, dict):
        raise PlanError(f"{path}: title must be a string or a table of strings by language "
                        f"({', '.join(TITLE_LANGS)}), got {title!r}")
    for lang, text in title.items():
        if lang not in TITLE_LANGS:
            raise PlanError(f"{path}: title.{lang}: unknown language; known: {', '.join(TITLE_LANGS)}")
        if not isinstance(text, str):
            raise PlanError(f"{path}: title.{lang} must be a string, got {text!r}")


def _what(types: tuple[type, ...]) -> str:
    return {int: "an integer", float: "a number", str: "a string", list: "a list"}[types[-1]]


def _is(value, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def check_plan_types(data: dict[str, Any], path: str) -> None:
    """Refuse a plan value of the wrong type, naming the file and key."""
    for key, types in TOP_TYPES.items():
        if key in data and not _is(data[key], types):
            raise PlanError(f"{path}: {key} must be {_what(types)}, got {data[key]!r}")
    if "title" in data:
        check_title(data["title"], path)
    for section, cls in SECTIONS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            continue  # load_plan says it must be a table
        defaults = cls()
        for key, value in table.items():
            if not hasattr(defaults, key):
                continue  # load_plan names unknown keys
            default, where = getattr(defaults, key), f"{path} [{section}].{key}"
            if isinstance(default, str) and not isinstance(value, str):
                raise PlanError(f"{where}: expected a string, got {value!r}")
            if isinstance(default, dict):
                if not isinstance(value, dict):
                    raise PlanError(f"{where}: expected a table, got {value!r}")
                value = list(value.values())
            types = ELEMENT_TYPES.get((section, key))
            if types and isinstance(value, list):
                for x in value:
                    if not _is(x, types):
                        raise PlanError(f"{where}: {x!r} is not {_what(types)}")
                    if key == "server_flags" and not all(isinstance(f, str) for f in x):
                        raise PlanError(f"{where}: every flag must be a string, got {x!r}")


def plan_from_dict(data: dict[str, Any], source: str = "plan") -> Plan:
    """Validate a parsed plan strictly: a typo'd key is an error naming the file and key."""
    unknown = set(data) - TOP_KEYS - set(SECTIONS) - {"expect", "slo", "cost"}
    if unknown:
        raise PlanError(f"{source}: unknown key(s) {sorted(unknown)}; known: "
                        f"{sorted(TOP_KEYS | set(SECTIONS) | {'expect', 'slo', 'cost'})}")
    check_plan_types(data, source)
    plan = Plan(source=source)
    for k in TOP_KEYS & set(data):
        setattr(plan, k, data[k])
    for name, cls in SECTIONS.items():
        if name in data:
            if not isinstance(data[name], dict):
                raise PlanError(f"{source}: [{name}] must be a table")
            setattr(plan, name, _build(cls, data[name], f"{source} [{name}]"))
    replay.resolve_paths(plan.workload, source)
    if plan.sweep.request_rate and "concurrency" not in (data.get("sweep") or {}):
        plan.sweep.concurrency = []      # an open loop without a cap: nothing waits for a slot
    if "expect" in data:
        try:
            plan.expect = expect_from_dict(data["expect"], source)
        except ExpectError as e:
            raise PlanError(str(e)) from None
    if "slo" in data:
        try:
            plan.slo = slo_from_dict(data["slo"], source).to_dict()
        except SloError as e:
            raise PlanError(str(e)) from None
    if "cost" in data:
        try:
            plan.cost = cost_from_dict(data["cost"], source).to_dict()
        except CostError as e:
            raise PlanError(str(e)) from None
    check_plan(plan)
    return plan


MAX_PLAN_BYTES = MAX_PLAN_FILE_BYTES


def load_plan(path: str | Path) -> Plan:
    """Read a plan.toml; raise PlanError naming the file (and line) on any problem."""
    path = Path(path)
    if not path.exists():
        raise PlanError(f"{path}: no such plan file")
    data = read_toml_file(path, str(path), MAX_PLAN_BYTES, PlanError)
    return plan_from_dict(data, source=str(path))
