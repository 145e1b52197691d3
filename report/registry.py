"""Quantities declared once: a function whose parameters name its inputs, registered where it is defined.

`@point_quantity(unit=...)` and `@round_quantity(unit=...)` register a function under its own
name; its ledger key is `p.<point>.<name>` or `r.<name>`. Each parameter names one input:

- a raw source the round provides (`RawSources`: a point's requests, the SLO, the valid
  points' loads), whose provenance the value cites;
- another quantity: for a point quantity the point's own `p.<point>.<param>` first, then the
  round's `r.<param>`; for a round quantity `r.<param>` (one the ledger did not derive is an
  absent input, with that reason);
- `each_<name>` (round quantities): the valid points' `p.<point>.<name>` values in load
  order, None where a point's value is absent;
- `first_valid_<name>` and `prev_<name>` (point quantities across points): what `<name>`
  binds at the first valid point and at the last valid point before this one (a raw input of
  that point, else its `p.<point>.<name>`). Where there is no valid point before this one, a
  `prev_` parameter with a default keeps it and one without is absent with that reason; where
  there is, an absent value there makes this one absent, default or not. `resolve_point`
  leaves these quantities (and those of its module that read them) out; `resolve_across`
  resolves them, point after point.

A round quantity without parameters is a constant its module states (a policy threshold); it
cites the module's file. `@round_quantity(key=...)` names its key where the function's own name
is a point quantity's (`r.preemptions` beside `p.<point>.preemptions`), and
`@round_quantity(over_points=True)` resolves it with the quantities over the valid points
(once validity is known) though it reads no `each_` input (how many points are valid).

A parameter with a default is optional: an absent input passes None instead of making the
value absent, and one that names no input at all keeps its default. `resolve_point` and `resolve_round` compute the quantities one module registered in
dependency order (declaration order among independent ones), so adding a quantity is adding
one function. Invariant: a name is registered once (a second registration raises).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from report.ledger import Ledger, Reason, Source, Value

EACH = "each_"
FIRST, PREV = "first_valid_", "prev_"


@dataclass(frozen=True)
class Declared:
    """One registered quantity: its function, scope, unit and the names of its inputs."""

    func: Callable
    scope: str                     # "point" or "round"
    unit: str
    params: tuple[str, ...]
    optional: frozenset[str]
    per: str = ""                  # point quantities of each item ("gpu", "engine"), or ""
    key: str = ""                  # its key's name where it is not the function's, or ""
    valid_only: bool = False       # resolved over the valid points without an `each_` input

    @property
    def name(self) -> str:
        return self.key or self.func.__name__

    @property
    def over_points(self) -> bool:
        """Whether it is resolved over the valid points (an `each_` parameter, or declared so)."""
        return self.valid_only or any(p.startswith(EACH) for p in self.params)

    @property
    def across(self) -> bool:
        """Whether it reads other points' values itself (a `first_valid_` or `prev_` parameter)."""
        return any(p.startswith((FIRST, PREV)) for p in self.params)


REGISTRY: dict[str, Declared] = {}


def _register(scope: str, unit: str, per: str = "", key: str = "",
              valid_only: bool = False) -> Callable[[Callable], Callable]:
    def deco(func: Callable) -> Callable:
        name = key or func.__name__
        if func.__name__ in REGISTRY or any(d.scope == scope and d.name == name for d in REGISTRY.values()):
            raise ValueError(f"quantity {name!r} declared twice")
        sig = inspect.signature(func).parameters
        REGISTRY[func.__name__] = Declared(
            func=func, scope=scope, unit=unit, params=tuple(sig),
            optional=frozenset(n for n, p in sig.items() if p.default is not inspect.Parameter.empty),
            per=per, key=key, valid_only=valid_only)
        return func
    return deco


def point_quantity(unit: str = "", per: str = "") -> Callable[[Callable], Callable]:
    """Register a quantity of each point: key `p.<point>.<function name>`; with PER ("gpu"),
    one of each of the point's items: key `p.<point>.<item>.<function name>`, for each item the
    raw input `<per>_items` names (item -> the raw inputs that item binds, e.g. {"gpu1": {"gpu": 1}})."""
    return _register("point", unit, per)


def round_quantity(unit: str = "", key: str = "", over_points: bool = False) -> Callable[[Callable], Callable]:
    """Register a quantity of the round over its valid points: key `r.<function name>` (`r.<KEY>`);
    OVER_POINTS: resolved with those that read the valid points' values."""
    return _register("round", unit, key=key, valid_only=over_points)


@dataclass
class RawSources:
    """Raw inputs by name: a value (or the Reason it is missing) and the samples it came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, tuple[str | Source, ...]] = field(default_factory=dict)

    def add(self, name: str, value: Any, sources: tuple[str | Source, ...] = ()) -> None:
        self.values[name] = value
        self.sources[name] = sources


def declared(scope: str, module: str, per: str = "") -> list[Declared]:
    """The quantities of SCOPE (of each PER item, or of the point itself) that MODULE registered,
    in dependency order (declaration order otherwise)."""
    mine = {d.name: d for d in REGISTRY.values()
            if d.scope == scope and d.func.__module__ == module and d.per == per}
    order: list[Declared] = []
    state: dict[str, int] = {}

    def visit(n: str, path: tuple[str, ...]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            raise ValueError(f"quantities depend on each other in a cycle: {' -> '.join(path + (n,))}")
        state[n] = 1
        for p in mine[n].params:
            dep = p.removeprefix(EACH) if scope == "round" else p
            if dep in mine and dep != n:
                visit(dep, path + (n,))
        state[n] = 2
        order.append(mine[n])

    for n in mine:
        visit(n, ())
    return order


def _input(led: Ledger, raw: RawSources, d: Declared, param: str, prefix: str,
           outer: str = "") -> tuple[Any, tuple]:
    """The value one parameter binds to (a Value, a raw value, a list) and the sources it cites;
    an item's quantity (OUTER: its point's prefix) reads its point's quantities too."""
    if param in raw.values:
        v = raw.values[param]
        if isinstance(v, Reason):
            return Value(key=param, value=None, missing=v), ()
        return v, raw.sources.get(param, ())
    for key in (prefix + param, *((outer + param,) if outer else ()), "r." + param):
        if key in led:
            return led[key], ()
    # A quantity the ledger did not derive here (its own inputs were not there to derive it).
    return Value(key=param, value=None, missing=Reason.of("reason.not_derived", key=prefix + param)), ()


def _bound(d: Declared, param: str, raw: RawSources, led: Ledger, prefix: str, outer: str = "") -> bool:
    """Whether PARAM names an input (an optional one that names none keeps its default)."""
    return (param not in d.optional or param in raw.values or prefix + param in led
            or bool(outer) and outer + param in led or "r." + param in led)


def _resolve_at(led: Ledger, quantities: list[Declared], prefix: str, raw: RawSources,
                outer: str = "") -> None:
    for d in quantities:
        inputs, sources = {}, ()
        for param in d.params:
            if not _bound(d, param, raw, led, prefix, outer):
                continue
            inputs[param], src = _input(led, raw, d, param, prefix, outer)
            sources += src
        led.derive(prefix + d.name, d.func, unit=d.unit, sources=sources, optional=d.optional, **inputs)


def resolve_point(led: Ledger, module: str, pid: str, raw: RawSources) -> None:
    """Every point quantity MODULE registered, of point PID, into LED; then those of each item
    (per="gpu": of each GPU the raw input `gpu_items` names), under `p.<point>.<item>.`."""
    prefix = f"p.{pid}."
    across = across_points(module)
    _resolve_at(led, [d for d in declared("point", module) if d.name not in across], prefix, raw)
    pers = dict.fromkeys(d.per for d in REGISTRY.values()
                         if d.scope == "point" and d.func.__module__ == module and d.per)
    for per in pers:
        items = raw.values.get(f"{per}_items")
        if not isinstance(items, dict):
            continue        # no items of that kind here (a round without GPU samples)
        cites = raw.sources.get(f"{per}_items", ())
        for item, binds in items.items():
            sub = RawSources({**raw.values, **binds}, {**raw.sources, **{k: cites for k in binds}})
            _resolve_at(led, declared("point", module, per), f"{prefix}{item}.", sub, prefix)


def resolve_round(led: Ledger, module: str, pids: list[str], raw: RawSources,
                  over_points: bool | None = None) -> None:
    """Every round quantity MODULE registered, over the points PIDS (the valid ones, in load order);
    with OVER_POINTS, only those that read the valid points' values (True) or only the others (False)."""
    for d in declared("round", module):
        if over_points is not None and d.over_points != over_points:
            continue
        inputs, sources = {}, ()
        for param in d.params:
            if param.startswith(EACH) and param not in raw.values:
                vals = [led.get(f"p.{pid}.{param.removeprefix(EACH)}") for pid in pids]
                inputs[param] = [v.value if v is not None and v.present else None for v in vals]
                sources += tuple(s for v in vals if v is not None for s in v.sources)
            elif _bound(d, param, raw, led, "r."):
                inputs[param], src = _input(led, raw, d, param, "r.")
                sources += src
        if not d.params:
            # A quantity without inputs is a constant its module states: it cites that file.
            sources = (d.func.__module__.replace(".", "/") + ".py",)
        led.derive("r." + d.name, d.func, unit=d.unit, sources=tuple(dict.fromkeys(sources)),
                   optional=d.optional, **inputs)


def across_points(module: str) -> set[str]:
    """The point quantities MODULE registered that read other points: directly (`first_valid_`,
    `prev_`) or through another of its quantities that does."""
    out: set[str] = set()
    for d in declared("point", module):     # dependency order: a quantity's inputs come first
        if d.across or out & set(d.params):
            out.add(d.name)
    return out


def _other_point(param: str, pid: str, pids: list[str], among: list[str]) -> str | None:
    """The point a `first_valid_`/`prev_` PARAM reads at PID: the first point of AMONG, or the last one
    of AMONG before PID in PIDS' order (None where there is none)."""
    if param.startswith(FIRST):
        return among[0] if among else None
    before = [q for q in pids[:pids.index(pid)] if q in among]
    return before[-1] if before else None


def resolve_across(led: Ledger, module: str, pids: list[str], among: list[str],
                   raws: dict[str, RawSources]) -> None:
    """Every point quantity MODULE registered that reads other points (across_points), at each
    point of PIDS in order, those parameters naming the points of AMONG (the valid points, in load
    order); RAWS: each point's raw inputs."""
    across = across_points(module)
    quantities = [d for d in declared("point", module) if d.name in across]
    for pid in pids:
        for d in quantities:
            raw, bound = RawSources(dict(raws[pid].values), dict(raws[pid].sources)), set()
            for param in d.params:
                if not param.startswith((FIRST, PREV)):
                    continue
                other = _other_point(param, pid, pids, among)
                if other is None and param in d.optional:
                    continue        # no such point: the parameter keeps its default
                raw.add(param, *((Reason.of("reason.no_valid_point_before"), ()) if other is None else
                                 _input(led, raws[other], d, param.removeprefix(FIRST).removeprefix(PREV),
                                        f"p.{other}.")))
                bound.add(param)
            _resolve_at(led, [replace(d, optional=d.optional - bound)], f"p.{pid}.", raw)
