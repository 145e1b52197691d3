"""Quantities declared once: a function whose parameters name its inputs, registered where it is defined.

`@point_quantity(unit=...)` and `@round_quantity(unit=...)` register a function under its own
name; its ledger key is `p.<point>.<name>` or `r.<name>`. Each parameter names one input:

- a raw source the round provides (`RawSources`: a point's requests, the SLO, the valid
  points' loads), whose provenance the value cites;
- another quantity: for a point quantity the point's own `p.<point>.<param>` first, then the
  round's `r.<param>`; for a round quantity `r.<param>` (one the ledger did not derive is an
  absent input, with that reason);
- `each_<name>` (round quantities): the valid points' `p.<point>.<name>` values in load
  order, None where a point's value is absent (a `PointValues`: `require_points` raises
  Absent naming that point and its reason).
- `first_valid_<name>` and `prev_<name>` (point quantities across points): what `<name>`
  binds at the first valid point and at the last valid point before this one (a raw input of
  that point, else its `p.<point>.<name>`). Where there is no valid point before this one, a
  `prev_` parameter with a default keeps it and one without is absent with that reason; where
  there is, an absent value there makes this one absent, default or not. `resolve_point`
  leaves these quantities (and those of its module that read them) out; `resolve_across`
  resolves them, point after point.

A round quantity without parameters is a constant its module states (a policy threshold); it
cites the module's file. `@round_quantity(key=...)` names its key where the function's own name
is a point quantity's (`r.preemptions` beside `p.<point>.preemptions`), `@point_quantity(key=...)`
where it is not the quantity's (`p.<point>.valid`, `passed_every_check`), and
`@round_quantity(over_points=True)` resolves it with the quantities over the valid points
(once validity is known) though it reads no `each_` input (how many points are valid).

A parameter with a default is optional: an absent input passes None instead of making the
value absent, and one that names no input at all keeps its default. `resolve_point` and
`resolve_round` compute the quantities one module registered in dependency order (declaration order among independent ones), so adding a quantity is adding
one function. Invariant: a name is registered once in each scope (a second registration
raises); a point quantity may share its name with a round one (`p.<point>.pool_tokens_usable`, the
point's server set's, beside `r.pool_tokens_usable`).

A quantity that applies to some points only (an open loop's, a closed loop's, a server set's)
returns DOES_NOT_APPLY elsewhere, or reads a raw input that holds it there: the resolver then
records no key, and skips the quantities of the same call that read it (those that read
`r.<name>` instead where the round has one: the point's `pool_tokens_usable`, else the round's). Declared with
`first_present=True`, a quantity is its first input the ledger holds present (the others are
neither passed nor cited). Declared with `after_valid_points=True`, it reads what only the
valid points give: its module's other quantities are resolved while the round is measured
(`resolve_point(..., after_valid_points=False)`), it once validity is known (`True`).

A generic function (a ratio, a roofline step) is declared as a point or round quantity of the
calling module with `bound_quantity(scope, name, func, unit=..., param="input", ...)`, its
parameters renamed after the inputs they read (`bind`; a string constant given as `Given(...)`);
the ledger records the function itself. Keys of one formula with different constants are one
such declaration in a loop over a table of the constants.

Scopes of their own, with the same dependency order: `cross_quantity` (a round against its
predecessor, keys `x.<name>`) and `plan_quantity` (the capacity planner, keys `<name>`) declare
a generic function as a quantity, its parameters renamed after the inputs they read (`bind`),
in groups that `resolve_scope` resolves once the caller has selected their inputs.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from report.ledger import Absent, Ledger, Reason, Source, Value

EACH = "each_"
FIRST, PREV = "first_valid_", "prev_"


class _DoesNotApply:
    """The value of a quantity at a point it does not apply to (see the module docstring)."""

    def __repr__(self) -> str:
        return "DOES_NOT_APPLY"


DOES_NOT_APPLY = _DoesNotApply()


@dataclass(frozen=True)
class Declared:
    """One registered quantity: its function, scope, unit and the names of its inputs."""

    func: Callable
    scope: str                     # "point" or "round"
    unit: str
    params: tuple[str, ...]
    optional: frozenset[str]
    per: str = ""                  # point quantities of each item ("gpu", "engine"), or ""
    first_present: bool = False    # its value is its first input present (module docstring)
    after_valid_points: bool = False   # resolved once validity is known (module docstring)
    home: str = ""                 # the module that declared a bound function (`bind`), else ""
    key: str = ""                  # its key's name where it is not the function's, or ""
    valid_only: bool = False       # resolved over the valid points without an `each_` input

    @property
    def name(self) -> str:
        return self.key or self.func.__name__

    @property
    def module(self) -> str:
        """The module that declared it: its function's own, or where `bind` named it."""
        return self.home or self.func.__module__

    @property
    def over_points(self) -> bool:
        """Whether it is resolved over the valid points (an `each_` parameter, or declared so)."""
        return self.valid_only or any(p.startswith(EACH) for p in self.params)

    @property
    def across(self) -> bool:
        """Whether it reads other points' values itself (a `first_valid_` or `prev_` parameter)."""
        return any(p.startswith((FIRST, PREV)) for p in self.params)


# By "<scope>.<name>" ("point.requests", "round.requests").
REGISTRY: dict[str, Declared] = {}


def _enter(entry: str, func: Callable, scope: str, unit: str, per: str, home: str = "",
           **more: Any) -> Callable:
    """Register FUNC under ENTRY (`<scope>.<name>`), its parameters its inputs (those with a default optional)."""
    if entry in REGISTRY:
        raise ValueError(f"quantity {entry!r} declared twice")
    sig = inspect.signature(func).parameters
    REGISTRY[entry] = Declared(
        func=func, scope=scope, unit=unit, params=tuple(sig),
        optional=frozenset(n for n, p in sig.items() if p.default is not inspect.Parameter.empty),
        per=per, home=home, **more)
    return func


def _register(scope: str, unit: str, per: str = "", key: str = "", **more: Any) -> Callable[[Callable], Callable]:
    def deco(func: Callable) -> Callable:
        return _enter(f"{scope}.{key or func.__name__}", func, scope, unit, per, key=key, **more)
    return deco


def point_quantity(unit: str = "", per: str = "", first_present: bool = False,
                   after_valid_points: bool = False, key: str = "") -> Callable[[Callable], Callable]:
    """Register a quantity of each point: key `p.<point>.<function name>` (`p.<point>.<KEY>`); with PER ("gpu"),
    one of each of the point's items: key `p.<point>.<item>.<function name>`, for each item the
    raw input `<per>_items` names (item -> the raw inputs that item binds, e.g. {"gpu1": {"gpu": 1}}).
    FIRST_PRESENT and AFTER_VALID_POINTS: see the module docstring."""
    return _register("point", unit, per, key=key, first_present=first_present, after_valid_points=after_valid_points)


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
            if d.scope == scope and d.module == module and d.per == per}
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
    # A quantity the ledger did not derive here (its own inputs were not there to derive it);
    # an input no quantity declares and no raw source gave is a fault of the declaration, said
    # at once rather than left as a silent absence.
    if not _declared_name(param):
        raise LookupError(f"quantity {d.name!r} ({d.module}) reads {param!r}: no quantity declares it and "
                          "its raw sources do not give it (a raw input is added with a Reason where it is missing)")
    return Value(key=param, value=None, missing=Reason.of("reason.not_derived", key=prefix + param)), ()


def _declared_name(param: str) -> bool:
    """Whether some quantity is named PARAM, PARAM reads one across points (`each_`, `prev_`,
    `first_valid_`), or some builder of raw inputs adds one of that name (`raw.add("name", ...)`)."""
    names = {d.name for d in REGISTRY.values()}
    return param in _raw_input_names() or \
        any(param.removeprefix(pre) in names for pre in ("", "each_", "prev_", "first_valid_"))


@lru_cache(maxsize=1)
def _raw_input_names() -> frozenset[str]:
    """The raw inputs the report's builders add by a literal name (report/**/*.py)."""
    root = Path(__file__).parent
    return frozenset(name for f in root.rglob("*.py")
                     for name in re.findall(r"\.add\(\s*\"([a-z_0-9]+)\"", f.read_text(encoding="utf-8")))


def _bound(d: Declared, param: str, raw: RawSources, led: Ledger, prefix: str, outer: str = "") -> bool:
    """Whether PARAM names an input (an optional one that names none keeps its default)."""
    return (param not in d.optional or param in raw.values or prefix + param in led
            or bool(outer) and outer + param in led or "r." + param in led)


def _first_present(d: Declared, raw: RawSources, led: Ledger, prefix: str, outer: str) -> list[str]:
    """The one parameter a first_present quantity binds: its first input present, else its last."""
    for param in d.params:
        keys = (prefix + param, *((outer + param,) if outer else ()), "r." + param)
        v = raw.values[param] if param in raw.values else next((led[k] for k in keys if k in led), None)
        if v is not None and not isinstance(v, Reason) and (not isinstance(v, Value) or v.present):
            return [param]
    return list(d.params[-1:])


def _resolve_at(led: Ledger, quantities: list[Declared], prefix: str, raw: RawSources,
                outer: str = "") -> None:
    skipped: set[str] = set()     # quantities that do not apply here (DOES_NOT_APPLY)
    for d in quantities:
        inputs, sources = {}, ()
        params = _first_present(d, raw, led, prefix, outer) if d.first_present else d.params
        # The one input a first_present quantity binds is not optional: its absence is the value's.
        optional = d.optional - set(params) if d.first_present else d.optional
        for param in params:
            if param in optional and not _bound(d, param, raw, led, prefix, outer):
                continue
            inputs[param], src = _input(led, raw, d, param, prefix, outer)
            sources += src
        # An input that does not apply here is the round's of that name where there is one.
        if any(p in skipped and "r." + p not in led or v is DOES_NOT_APPLY for p, v in inputs.items()):
            skipped.add(d.name)
            continue
        v = led.derive(prefix + d.name, d.func, unit=d.unit, sources=sources, optional=optional, **inputs)
        if v.value is DOES_NOT_APPLY:
            del led.values[v.key]     # the point has no such quantity: no key, not an absent one
            skipped.add(d.name)


def _phase(quantities: list[Declared], after_valid_points: bool | None) -> list[Declared]:
    """QUANTITIES of one resolve phase (all of them for None); one resolved first may not read one resolved after."""
    if after_valid_points is None:
        return quantities
    mine = [d for d in quantities if d.after_valid_points == after_valid_points]
    later = {d.name for d in quantities if d.after_valid_points}
    for d in mine:
        if not d.after_valid_points and later & set(d.params):
            raise ValueError(f"{d.name} reads {sorted(later & set(d.params))}, resolved after the valid points")
    return mine


def resolve_point(led: Ledger, module: str, pid: str, raw: RawSources,
                  after_valid_points: bool | None = None) -> None:
    """Every point quantity MODULE registered, of point PID, into LED; then those of each item
    (per="gpu": of each GPU the raw input `gpu_items` names), under `p.<point>.<item>.`; with
    AFTER_VALID_POINTS, only those declared so (True) or only the others (False)."""
    prefix = f"p.{pid}."
    across = across_points(module)
    _resolve_at(led, [d for d in _phase(declared("point", module), after_valid_points) if d.name not in across],
                prefix, raw)
    pers = dict.fromkeys(d.per for d in REGISTRY.values()
                         if d.scope == "point" and d.module == module and d.per)
    for per in pers:
        items = raw.values.get(f"{per}_items")
        if not isinstance(items, dict):
            continue        # no items of that kind here (a round without GPU samples)
        cites = raw.sources.get(f"{per}_items", ())
        # An item with a source of its own (`<per>_item_sources`: item -> sources) cites that alone.
        own = raw.values.get(f"{per}_item_sources") or {}
        for item, binds in items.items():
            c = own.get(item, cites)
            sub = RawSources({**raw.values, **binds}, {**raw.sources, **{k: c for k in binds}})
            _resolve_at(led, _phase(declared("point", module, per), after_valid_points),
                        f"{prefix}{item}.", sub, prefix)


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
                inputs[param] = PointValues(param.removeprefix(EACH), pids, vals)
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


# Over the valid points: an `each_` input that says why a point's value is absent.


class PointValues(list):
    """The valid points' values of one quantity in load order, None where a point's is absent;
    `absence(i)` is the Reason naming that point and its own reason."""

    def __init__(self, name: str, pids: list[str], found: list[Value | None]) -> None:
        super().__init__(v.value if v is not None and v.present else None for v in found)
        self.name, self.pids, self.found = name, pids, found

    def absence(self, i: int) -> Reason:
        """Why the I-th point's value is None: the point, and its value's reason (or that it was not derived)."""
        v = self.found[i]
        cause = (Reason.of("reason.not_derived", key=f"p.{self.pids[i]}.{self.name}") if v is None
                 else v.missing or Reason.of("reason.no_reason"))
        return Reason.of("reason.point_input_absent", input=self.name, point=self.pids[i], cause=cause)


def require_points(values: list, indices: Iterable[int], name: str) -> None:
    """Absent when any of an `each_` input's VALUES at INDICES is None, naming its point and
    reason where the resolver passed them (PointValues), else that NAME is absent."""
    for i in indices:
        if values[i] is None:
            raise Absent.because(values.absence(i) if isinstance(values, PointValues)
                                 else Reason.of("reason.input_none", input=name))


# Scopes of their own: a generic function declared as a quantity, its parameters renamed to the
# inputs they read. Invariant: a name is registered once per scope and group (REGISTRY key
# `<scope>.<group>.<name>`): one way of computing a key per group.


@dataclass(frozen=True)
class Given:
    """A constant a bound parameter takes where a plain string would name an input (`metric=Given("ttft_ms_p50")`)."""

    value: Any


def bind(func: Callable, name: str, **inputs: Any) -> Callable:
    """FUNC as the quantity NAME: each parameter INPUTS names reads the input its string names
    (`old="prev_output_tok_s"`) or takes the constant it gives (`sparse=True`, `metric=Given("ttft_ms_p50")`);
    the others keep their names. The ledger records FUNC itself: its function and docstring."""
    own = inspect.signature(func).parameters
    if set(inputs) - set(own):
        raise TypeError(f"{func.__qualname__} has no parameter {sorted(set(inputs) - set(own))} to bind")
    fixed = {p: v.value if isinstance(v, Given) else v for p, v in inputs.items() if not isinstance(v, str)}
    names = {p: inputs.get(p, p) for p in own if p not in fixed}     # FUNC's parameter -> its input
    back = {n: p for p, n in names.items()}

    def bound(**given: Any) -> Any:
        return func(**fixed, **{back[n]: v for n, v in given.items()})

    bound.__module__, bound.__qualname__, bound.__doc__ = func.__module__, func.__qualname__, func.__doc__
    bound.__name__ = name
    bound.__signature__ = inspect.Signature([own[p].replace(name=n) for p, n in names.items()])
    return bound


def _declare(scope: str, name: str, func: Callable, unit: str, per: str, inputs: dict[str, Any]) -> Callable:
    # The module whose top level declares it (the caller of bound_quantity, cross_quantity, plan_quantity).
    home = sys._getframe(2).f_globals["__name__"]
    return _enter(".".join(filter(None, (scope, per, name))), bind(func, name, **inputs), scope, unit, per, home)


def bound_quantity(scope: str, name: str, func: Callable, unit: str = "", per: str = "", **inputs: Any) -> Callable:
    """Declare FUNC as the SCOPE ("point" or "round") quantity NAME of the calling module, its
    parameters bound to INPUTS (`bind`): resolved with that module's own by `resolve_point` / `resolve_round`;
    with PER, one of each of the point's items, as `point_quantity(per=...)` declares it."""
    home = sys._getframe(1).f_globals["__name__"]
    return _enter(f"{scope}.{name}", bind(func, name, **inputs), scope, unit, per, home)


def cross_quantity(name: str, func: Callable, unit: str = "", per: str = "", **inputs: Any) -> Callable:
    """Declare a quantity of a round against its predecessor: FUNC with its parameters bound to
    INPUTS (`bind`), of the group PER that `resolve_scope` resolves when the round selects it."""
    return _declare("cross", name, func, unit, per, inputs)


def plan_quantity(name: str, func: Callable, unit: str = "", per: str = "", **inputs: Any) -> Callable:
    """Declare a quantity of the capacity planner: FUNC with its parameters bound to INPUTS
    (`bind`), of the group PER that `plan` resolves in its turn ("": after the others)."""
    return _declare("plan", name, func, unit, per, inputs)


def resolve_scope(led: Ledger, scope: str, module: str, prefix: str, raw: RawSources, per: str = "") -> None:
    """Every SCOPE quantity MODULE declared of group PER, into LED under PREFIX (`x.`, `x.<point>.`,
    or "" for a plan), in dependency order; a parameter reads RAW, else `<prefix><param>`."""
    _resolve_at(led, declared(scope, module, per), prefix, raw)
