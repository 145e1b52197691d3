"""The order a round's quantities are resolved in, as data: its phases, and the graph over every quantity that checks them.

A phase resolves the quantities its modules declared in one scope, over one set of points,
reading one kind of raw inputs, where its condition holds. Two drivers walk a stage's phases in
this table's order, and nothing else resolves a quantity: `derive.round.stages.resolve_stage`
a round's stages (consecutive point phases point by point), `resolve_selected` here the stages
whose inputs their caller selects (a round of server sets, the previous round, the planner).
Inside a phase the modules come in the order `graphlib` gives over what their quantities read
(this table's order among independent ones); inside a module, in the registry's dependency order.
Invariant: every declared quantity belongs to exactly one phase, and reads only raw inputs and
quantities of its own phase or an earlier one (`check`, run by tests/unit/report/test_phases.py).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Callable, Iterable

import report.registry as RG
from report.ledger import Ledger
from report.registry import (
    EACH,
    FIRST,
    PREV,
    Declared,
    RawSources,
    _raw_input_names,
    across_points,
    resolve_point,
    resolve_scope,
)

# The modules whose quantities the phases resolve: named here once.
REQUESTS, STATS, SESSIONS = "report.derive.stats.requests", "report.derive.stats.point", "report.derive.stats.sessions"
DELIVERY, VALIDITY, HOST = "report.derive.delivery", "report.derive.validity", "report.derive.host"
SAMPLER, CACHE_CONFIG, SERVER = "report.derive.series.sampler", "report.derive.series.cache_config", "report.derive.series.server"
SIZES, SERVERLOG = "report.derive.sizes", "report.derive.serverlog"
CLIENT_ITL, CLIENT_NODES = "report.derive.clienterror.itl", "report.derive.clienterror.nodes"
TIMING_CLIENT, TIMING_SERVER = "report.derive.timing.client", "report.derive.timing.server"
SWEEP_CONCURRENCY, SWEEP_LENGTHS = "report.derive.sweep.concurrency", "report.derive.sweep.lengths"
INFLIGHT, ADMISSION, ENGINES = "report.derive.load.inflight", "report.derive.load.admission", "report.derive.load.engines"
RECONCILE, STEP, PEERS = "report.derive.reconcile.model", "report.derive.step", "report.derive.peers"
PREFILLTAIL, DATASHEET, POWER = "report.derive.prefilltail", "report.derive.gpu.datasheet", "report.derive.gpu.power"
GPM, PARALLEL, ACROSS = "report.derive.gpu.gpm", "report.derive.gpu.parallel", "report.derive.gpu.across"
CEILING, PER_GPU, ENERGY = "report.derive.gpu.ceiling", "report.derive.gpu.per_gpu", "report.derive.gpu.energy"
DIAGNOSIS, GOODPUT, COST = "report.judge.diagnosis", "report.judge.goodput", "report.judge.cost"
SETS, COMPARE, PLANNER = "report.judge.sets", "report.judge.compare", "report.planner.quantities"

# The cross-round groups, in the order they resolve: each shared point, the spread over them, a
# prefill rate borrowed from the previous round (then each point's prefill tail at that rate),
# prefill under concurrency, throughput at the same KV occupancy.
CROSS_GROUPS = ("pair", "repro_tput", "repro_ttft_p99", "prefill_rate")
CROSS_LATER_GROUPS = ("prefill_c1", "occupancy")


@dataclass(frozen=True)
class Phase:
    """One step of a round's ledger: which quantities it resolves, over which points, from which raw inputs, when."""

    name: str
    scope: str                    # "round", "point", "across" (a point's, reading other points), "cross", "plan"
    modules: tuple[str, ...]
    # A round's: "measured", "checked" (each point's checks known), "valid_points"; those whose
    # inputs their caller selects (resolve_selected): "server_sets", "cross", "plan".
    stage: str
    raw: str = ""                 # the raw inputs a round's phase reads (derive.round.stages); "" where selected
    points: str = "all"           # "all", "ok" (measured to the end), "valid", "valid_by_load"
    when: str = ""                # its condition (derive.round.stages._Stage.holds); "" always
    after_valid_points: bool | None = None    # point phases: only those declared so, or only the others
    over_points: bool | None = None           # round phases: only those over the valid points, or only the others
    groups: tuple[str, ...] | None = None     # cross and plan phases: the groups it resolves (None: all), each apart
    # The phase whose quantities this one resolves again from other inputs (in the graph once, as that phase's).
    again: str = ""


PHASES: tuple[Phase, ...] = (
    # Measured: what needs no point's validity. The round's settings, pool, peaks and policy first.
    Phase("round settings", "round", (SAMPLER, CACHE_CONFIG, SERVER, HOST, DATASHEET, SERVERLOG, CLIENT_NODES, SIZES, REQUESTS, VALIDITY),
          "measured", "round", over_points=False),
    Phase("point", "point", (STATS, SESSIONS, DELIVERY, VALIDITY, SERVER, HOST, SWEEP_CONCURRENCY, TIMING_CLIENT, TIMING_SERVER,
                              INFLIGHT, ADMISSION, ENGINES, CLIENT_ITL, CLIENT_NODES, SERVERLOG),
          "measured", "point", after_valid_points=False),
    Phase("modelled", "point", (RECONCILE, POWER, GPM, PARALLEL, ACROSS, CEILING, PER_GPU, STEP, ENERGY),
          "measured", "modelled"),
    Phase("peer results", "point", (PEERS,), "measured", "peers", when="peers"),
    Phase("peer results over the round", "round", (PEERS,), "measured", "round", when="peers"),
    # Checked: each point's failed checks, once the judge has found its validity.
    Phase("checks", "point", (DIAGNOSIS,), "checked", "checks"),
    # Over the valid points: fits never see an invalid point.
    Phase("validity over points", "round", (VALIDITY,), "valid_points", "valid", "valid", over_points=True),
    Phase("prefill rate", "round", (PREFILLTAIL,), "valid_points", "prefill_tail", "valid", when="valid_points"),
    Phase("prefill tail", "point", (PREFILLTAIL,), "valid_points", "prefill_tail_point", "ok",
          when="prefill_reference"),
    Phase("scaling", "across", (STATS,), "valid_points", "settings", "ok", when="concurrency_axis"),
    Phase("steps up", "across", (SWEEP_CONCURRENCY, STEP), "valid_points", "settings", "valid", when="concurrency_axis"),
    Phase("concurrency fits", "round", (SWEEP_CONCURRENCY,), "valid_points", "valid", "valid", when="concurrency_fits",
          over_points=True),
    Phase("length fits", "round", (SWEEP_LENGTHS,), "valid_points", "valid", "valid", when="length_fits"),
    Phase("admission queue", "point", (ADMISSION,), "valid_points", "point", after_valid_points=True),
    Phase("against the SLO", "point", (GOODPUT, COST), "valid_points", "point"),
    Phase("capacity", "round", (GOODPUT, COST, RECONCILE), "valid_points", "valid", "valid_by_load"),
    # Resolved by `resolve_selected`, from the inputs their caller selects (judge.sets, judge.compare,
    # planner.capacity): each set's point against the base set's, the round against the previous one.
    Phase("set comparisons", "point", (SETS,), "server_sets"),
    Phase("against the previous round", "cross", (COMPARE,), "cross", groups=CROSS_GROUPS),
    Phase("prefill tail at the previous round's rate", "point", (PREFILLTAIL,), "cross", again="prefill tail"),
    Phase("prefill and occupancy against the previous round", "cross", (COMPARE,), "cross", groups=CROSS_LATER_GROUPS),
    # The planner's groups in the order they resolve ("tokens" or "from_blocks": the size given).
    *(Phase(f"capacity plan: {' or '.join(g) or 'the rest'}", "plan", (PLANNER,), "plan", groups=g)
      for g in (("kv",), ("layout",), ("memory",), ("tokens", "from_blocks"), ("scaled",), ("default_chunk",), ("",))),
)

# A quantity's registry scope by the scope of the phase that resolves it.
REGISTRY_SCOPE = {"across": "point"}


class PhaseError(ValueError):
    """A declaration the phases cannot resolve: an input nothing gives, one given later, a cycle, a quantity no phase resolves."""


def members(phase: Phase) -> list[Declared]:
    """The declared quantities PHASE resolves, its modules' in table order."""
    if phase.again:
        return members(next(ph for ph in PHASES if ph.name == phase.again))
    scope = REGISTRY_SCOPE.get(phase.scope, phase.scope)
    out = []
    for module in phase.modules:
        across = across_points(module) if scope == "point" else set()
        for d in RG.REGISTRY.values():
            if d.scope != scope or d.module != module:
                continue
            if phase.scope == "point" and (d.name in across or phase.after_valid_points not in (None, d.after_valid_points)):
                continue
            if phase.scope == "across" and d.name not in across:
                continue
            if phase.scope == "round" and phase.over_points not in (None, d.over_points):
                continue
            if phase.groups is not None and d.per not in phase.groups:
                continue
            out.append(d)
    return out


def _reads(d: Declared) -> list[str]:
    """The quantity names D's parameters read (`each_`, `prev_`, `first_valid_` read the named quantity)."""
    return [p.removeprefix(EACH).removeprefix(FIRST).removeprefix(PREV) for p in d.params]


def _gives(reader: Declared, param: str, q: Declared) -> bool:
    """Whether Q is what READER's PARAM reads: a plan quantity the plan's; a cross-round one its own
    scope's or the round's values its caller passes; a round quantity the round's (a point's
    through `each_`); a point quantity its point's, else the round's."""
    if reader.scope == "plan":
        return q.scope == "plan"
    if reader.scope == "cross":
        return q.scope != "plan"
    if reader.scope == "round":
        return q.scope == ("point" if param.startswith(EACH) else "round")
    return q.scope == "point" or q.scope == "round" and not param.startswith((FIRST, PREV))


def _literals(pattern: str) -> frozenset[str]:
    """What PATTERN's group matches in report/**/*.py."""
    root = Path(__file__).parent
    return frozenset(n for f in root.rglob("*.py") for n in re.findall(pattern, f.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _raw_pattern() -> re.Pattern:
    """The raw inputs added by a formatted name (`raw.add(f"base_{qty}", ...)`): any name of that form."""
    forms = sorted(_literals(r"\.add\(\s*f\"([a-z_0-9{}]+)\""))
    return re.compile("|".join(re.sub(r"\{[a-z_0-9]*\}", "[a-z_0-9]+", f) for f in forms) or "(?!)")


@lru_cache(maxsize=1)
def _item_input_names() -> frozenset[str]:
    """The raw inputs an item binds (`<per>_items`: item -> {"name": value}), by the literal names report/**/*.py gives."""
    return _literals(r":\s*\{\"([a-z_0-9]+)\":")


@lru_cache(maxsize=1)
def _planner_records() -> frozenset[str]:
    """The keys the capacity planner records as given (report/planner/*.py: `("name", value, unit, doc, ...)` rows)."""
    root = Path(__file__).parent / "planner"
    return frozenset(n for f in root.glob("*.py") for n in re.findall(r'(?m)^\s*\("([a-z_0-9]+)", ', f.read_text(encoding="utf-8")))


def _node(phase: Phase, d: Declared) -> str:
    return f"{phase.scope}.{d.per + '.' if d.per else ''}{d.name}"


def graph(phases: tuple[Phase, ...] = PHASES) -> dict[str, set[str]]:
    """The dependency graph of every declared quantity (node `<phase scope>.[<per>.]<name>` -> the nodes it reads);
    PhaseError naming the quantity and input where an input names nothing declared and no raw
    input, is produced only by a later phase, or where a quantity belongs to no phase or two."""
    at: dict[str, tuple[int, Phase, Declared]] = {}
    entries = {id(d): k for k, d in RG.REGISTRY.items()}
    for i, phase in enumerate(phases):
        for d in members(phase) if not phase.again else ():
            entry = entries[id(d)]
            if entry in at:
                raise PhaseError(f"quantity {d.name!r} ({d.module}) is resolved by two phases: "
                                 f"{at[entry][1].name!r} and {phase.name!r}")
            at[entry] = (i, phase, d)
    for entry, d in RG.REGISTRY.items():
        if entry not in at:
            raise PhaseError(f"quantity {d.name!r} ({d.module}, {d.scope}) is resolved by no phase: "
                             "its module is in none of report/phases.py's phases of its scope")
    by_name: dict[str, list[tuple[int, Phase, Declared]]] = {}
    for i, phase, d in at.values():
        by_name.setdefault(d.name, []).append((i, phase, d))
    raw, out = _raw_input_names(), {}
    for i, phase, d in at.values():
        deps = out.setdefault(_node(phase, d), set())
        for param, name in zip(d.params, _reads(d)):
            # Another group of a cross or plan phase is resolved apart, from what its caller selects.
            found = [(j, ph, q) for j, ph, q in by_name.get(name, ()) if q is not d and _gives(d, param, q)
                     and not (j == i and ph.groups is not None and q.per != d.per)]
            sooner = [(j, ph, q) for j, ph, q in found if j <= i]
            deps.update(_node(ph, q) for _, ph, q in sooner)
            if sooner or param in raw or name in raw or _raw_pattern().fullmatch(param) \
                    or d.per and param in _item_input_names() or d.scope == "plan" and param in _planner_records():
                continue
            if found:
                raise PhaseError(f"quantity {d.name!r} ({d.module}, phase {phase.name!r}) reads {param!r}, "
                                 f"produced only later, in phase {found[0][1].name!r}")
            if param in d.optional:
                continue        # an optional parameter that names no input keeps its default
            raise PhaseError(f"quantity {d.name!r} ({d.module}, phase {phase.name!r}) reads {param!r}: "
                             "no quantity declares it and no raw input gives it")
    try:
        tuple(TopologicalSorter(out).static_order())
    except CycleError as e:
        raise PhaseError(f"quantities read each other in a cycle: {' -> '.join(reversed(e.args[1]))}") from None
    return out


def check(phases: tuple[Phase, ...] = PHASES) -> None:
    """PhaseError where the phases cannot resolve every declared quantity in order (see `graph`)."""
    graph(phases)


def module_order(phase: Phase) -> list[str]:
    """PHASE's modules in dependency order: a module after those whose quantities its own read,
    the table's order among independent ones (PhaseError on a cycle between modules)."""
    absent = [m for m in phase.modules if m not in sys.modules]
    if absent:
        raise PhaseError(f"phase {phase.name!r}: {absent} not imported, so their quantities are not registered")
    mine = members(phase)
    home = {d.name: d.module for d in mine}
    deps = {m: set() for m in phase.modules}
    for d in mine:
        deps[d.module].update(home[n] for n in _reads(d) if n in home and home[n] != d.module)
    ts = TopologicalSorter(deps)
    try:
        ts.prepare()
    except CycleError as e:
        raise PhaseError(f"phase {phase.name!r}: modules read each other in a cycle: {' -> '.join(e.args[1])}") from None
    ready, out = [], []
    while ts.is_active():
        ready += ts.get_ready()
        first = min(ready, key=phase.modules.index)     # the table's order among the ready ones
        ready.remove(first)
        out.append(first)
        ts.done(first)
    return out


# What a selected stage's caller gives for a phase and group (None: a phase of no groups): each
# time it is resolved, where (a point's id; a cross or plan key's prefix) and from which raw
# inputs. Read lazily, after the groups before it are resolved, so it may read their values.
Selected = Callable[[Phase, "str | None"], Iterable[tuple[str, RawSources]]]


def resolve_selected(led: Ledger, stage: str, inputs: Selected) -> None:
    """Every phase of STAGE into LED, in the table's order, each of its groups apart, once for
    each (where, raw inputs) INPUTS selects for it (none: not resolved)."""
    for ph in PHASES:
        if ph.stage != stage:
            continue
        for module in module_order(ph):
            for group in ph.groups if ph.groups is not None else (None,):
                for where, raw in inputs(ph, group):
                    if ph.scope == "point":
                        resolve_point(led, module, where, raw)
                    else:
                        resolve_scope(led, ph.scope, module, where, raw, group)
