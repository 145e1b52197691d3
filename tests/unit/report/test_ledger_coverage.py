"""Every quantity reaches a ledger of the committed bundles; a quantity module holds quantities and their steps only.

The ledgers: each committed bundle (runs/round-1, 2, 3, 5, 6, 10, 14 and the bundles in tests/fixtures,
whose h200-round-4 is runs/round-4 trimmed to three points: the whole round takes ~40 s to
build and reaches no other function), each round compared with its predecessor as the site
does, the hand-built bundle of test_ledger_contract.py sent as an open loop capped at its
concurrency (no committed round set an arrival rate), and the capacity planner's ledgers of every model config in tests/fixtures/models (each
way to size the pool). A registered quantity (report/registry.py) none of them holds fails. A
public function of a quantity module that none of them names as a `Value.func` must be a step
of one that does (its code names it, directly or through the functions it names), of the raw
inputs the quantities declare (read_round, point_raw, round_raw, plan_raw), of the planner's
notes or of the builder that judges each point's validity and bottleneck (build_ledger); any other fails.
NOT_IN_A_LEDGER, which would exempt one with its reason, exempts nothing.
What only the tests check (the engine tests' oracles, theory's closed forms) lives in
tests/oracles.py, which is not a quantity module.
"""
from __future__ import annotations

import importlib
import inspect
import json
import types

import pytest

from bundle.slo import slo_from_text
from bundle.store.reader import read_bundle
from report.derive.round.raw import point_raw, round_raw
from report.derive.round.read import RoundData, read_round
from report.judge.compare import cross_round_ledger
from report.judge.verdicts import build_ledger
from report.ledger import quantity_name
from report.planner import notes as N
from report.planner.capacity import plan, plan_raw
from report.registry import REGISTRY
from tests.conftest import FIXTURES, ROOT
from tests.unit.report.test_ledger_contract import QUANTITY_MODULES, write_fixture_bundle

COVERAGE_SLO = "ttft:1000,tpot:50,itl:60,e2e:60000,p:99"

# Rounds in comparison order (each is compared with the one before it) and lone bundles.
ROUND_CHAINS = ([ROOT / "runs" / f"round-{n}" / "bundle" for n in (1, 2, 3)],
                [FIXTURES / "h200-round-4", FIXTURES / "h200-lockstep"],
                [ROOT / "runs" / "round-5" / "bundle"],
                [ROOT / "runs" / "round-6" / "bundle"],
                [ROOT / "runs" / "round-10" / "bundle"],     # a replayed trace on two server sets
                [ROOT / "runs" / "round-14" / "bundle"],     # vllm bench serve's results beside ours
                [FIXTURES / "cpu-demo"],
                [FIXTURES / "ray-two-nodes"])    # two Ray nodes, an open loop, a worker killed

# The planner's ways to size the KV pool: none given, its memory, its tokens, its blocks.
PLAN_POOLS = ({}, {"kv_memory_gib": 20.0}, {"kv_pool_tokens": 100_000}, {"kv_pool_blocks": 5_000})

# The public functions of quantity modules that no ledger reaches and no ledger function uses,
# each with the reason it stays; the test fails on any other, and on a listed one that a
# ledger reaches or uses after all (remove it then).
NOT_IN_A_LEDGER: dict[str, str] = {}


def public_functions(module: str) -> list[str]:
    """"module.name" of each public function defined in MODULE (report.architecture.theory → theory.x)."""
    mod = importlib.import_module(module)
    short = module.rsplit(".", 1)[1]
    return [f"{short}.{name}" for name, f in inspect.getmembers(mod, inspect.isfunction)
            if f.__module__ == module and not name.startswith("_")]


@pytest.fixture(scope="module")
def reached_funcs(tmp_path_factory) -> set[str]:
    """Every Value.func of the ledgers described in the module docstring."""
    funcs: set[str] = set()
    path = tmp_path_factory.mktemp("coverage") / "open-loop"
    write_fixture_bundle(path)
    rd = read_round(read_bundle(path))
    for p in rd.points:
        p.settings["request_rate"] = 4.0     # an arrival rate, under the concurrency cap
    funcs |= {v.func for v in build_ledger(rd).values.values()}
    for chain in ROUND_CHAINS:
        prev = None
        for path in chain:
            rd = read_round(read_bundle(path))
            led = build_ledger(rd)
            if prev is not None:
                cross_round_ledger(led, rd, prev[1], prev[0])
            funcs |= {v.func for v in led.values.values()}
            prev = rd, led
    # An SLO that the trimmed H200 round meets at C=1 and misses at C=64 (ITL p99 72 ms): the
    # capacity functions reach a crossing.
    rd = read_round(read_bundle(FIXTURES / "h200-round-4"), (slo_from_text(COVERAGE_SLO), "--slo"))
    funcs |= {v.func for v in build_ledger(rd).values.values()}
    for config in sorted((FIXTURES / "models").glob("*.config.json")):
        for pool in PLAN_POOLS:
            p = plan(json.loads(config.read_text()), "H200", concurrency=16, input_len=1024,
                     output_len=256, **pool)
            funcs |= {v.func for v in p.ledger.values.values()}
    return funcs


@pytest.fixture(scope="module")
def reached(reached_funcs) -> set[str]:
    """The reached functions as "module.name"."""
    return {quantity_name(f) for f in reached_funcs}


def referenced(func) -> set:
    """The functions FUNC's code names: its module's globals, attributes of the modules it names,
    and the functions held by the items of a table it names (diagnosis.CHECKS: each check's
    condition)."""
    names, stack = set(), [func.__code__]
    while stack:
        code = stack.pop()
        names |= set(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    out = set()
    for n in names:
        v = func.__globals__.get(n)
        if inspect.isfunction(v):
            out.add(v)
        elif inspect.ismodule(v):
            out |= {w for m in names if inspect.isfunction(w := getattr(v, m, None))}
        elif isinstance(v, tuple):
            out |= {w for item in v if hasattr(item, "__dataclass_fields__")
                    for w in vars(item).values() if inspect.isfunction(w)}
    return out


def function_of(name: str):
    """The function a `Value.func` names ("report.derive.stats.samples.mean")."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


# The raw inputs registered quantities name (with the round's properties they read), what the
# planner says of a plan, and the builder that judges the points (the raw inputs of their
# validity): a function these use is a step of a quantity.
ROOTS = (read_round, point_raw, round_raw, plan_raw, N.modelled_notes, N.unmodelled_notes, N.warning_notes,
         build_ledger,
         *(p.fget for p in vars(RoundData).values() if isinstance(p, property)))


@pytest.fixture(scope="module")
def used(reached_funcs) -> set[str]:
    """ "module.name" of every function a reached function or a root uses, transitively."""
    todo = [function_of(f) for f in reached_funcs if f != "observed"] + list(ROOTS)
    seen: set = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo += [g for g in referenced(f) if g.__module__.startswith("report.")]
    return {f"{f.__module__.rsplit('.', 1)[1]}.{f.__name__}" for f in seen}


# A private step a builder declares as a quantity (the planner's `_twice`) leaves its module a builder's.
MODULES = tuple(sorted(set(QUANTITY_MODULES) | {d.func.__module__ for d in REGISTRY.values()
                                                 if not d.func.__qualname__.startswith("_")}))


@pytest.mark.parametrize("module", MODULES)
def test_every_public_function_of_a_quantity_module_is_reached_or_used(module, reached, used):
    public = public_functions(module)
    assert public
    dead = [f for f in public if f not in reached and f not in used and f not in NOT_IN_A_LEDGER]
    assert not dead, (f"{module}: public functions that no ledger of the committed bundles reaches "
                      f"and no reached function or root uses: {dead}. Wire them through a "
                      "ledger, use them, or remove them from the quantity modules")
    alive = [f for f in public if f in NOT_IN_A_LEDGER and (f in reached or f in used)]
    assert not alive, f"these are in a ledger now: remove them from NOT_IN_A_LEDGER: {alive}"


def test_every_listed_function_exists():
    public = {f for m in MODULES for f in public_functions(m)}
    assert not set(NOT_IN_A_LEDGER) - public, sorted(set(NOT_IN_A_LEDGER) - public)


def test_every_registered_quantity_reaches_a_ledger(reached_funcs):
    declared = {f"{d.func.__module__}.{d.func.__qualname__}" for d in REGISTRY.values()}
    assert not declared - reached_funcs, sorted(declared - reached_funcs)
