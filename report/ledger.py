"""The ledger: every number the report prints, each with the function and samples behind it.

A derived quantity is a pure function named for what it returns, whose parameters name its
inputs. `Ledger.derive` calls it and records provenance: the function, its one-line
docstring, the input values (or the ledger keys they came from), the bundle files and
sample ranges, and sanity flags. When any input is absent the value is None with a reason
in words, never 0 or a guess.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Value:
    """One ledger entry: a number (or None with a reason) and where it came from."""

    key: str
    value: Any
    unit: str = ""
    func: str = ""
    doc: str = ""
    inputs: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    missing: str | None = None

    @property
    def present(self) -> bool:
        return self.value is not None


class Absent(Exception):
    """Raised by a quantity function when its inputs cannot give a value; the message says why."""


def doc_line(func: Callable) -> str:
    """The first line of a function's docstring."""
    return (inspect.getdoc(func) or "").split("\n", 1)[0]


def _describe(v: Any) -> str:
    if isinstance(v, Value):
        return v.key
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)) or type(v).__name__ in ("ndarray", "RequestTable"):
        return f"{len(v)} values"
    return str(v)


@dataclass
class Ledger:
    """All values of one report, keyed by a dotted name, in insertion order."""

    values: dict[str, Value] = field(default_factory=dict)

    def derive(self, key: str, func: Callable, *, unit: str = "", sources: tuple[str, ...] = (),
               flags: tuple[str, ...] = (), **inputs: Any) -> Value:
        """Compute func(**inputs), unwrapping Values, and store it under KEY with provenance."""
        if key in self.values:
            raise KeyError(f"ledger key {key!r} computed twice")
        missing = None
        kwargs = {}
        for name, v in inputs.items():
            if isinstance(v, Value):
                if not v.present:
                    missing = f"{name} is absent: {v.missing}"
                    break
                kwargs[name] = v.value
            elif v is None:
                missing = f"{name} is absent"
                break
            else:
                kwargs[name] = v
        result = None
        if missing is None:
            try:
                result = func(**kwargs)
            except Absent as e:
                missing = str(e)
            if isinstance(result, float) and not math.isfinite(result):
                missing, result = f"{func.__name__} is undefined for these inputs", None
        inherited = tuple(s for v in inputs.values() if isinstance(v, Value) for s in v.sources)
        val = Value(
            key=key, value=result, unit=unit, func=f"{func.__module__}.{func.__qualname__}",
            doc=doc_line(func),
            inputs=tuple((n, _describe(v)) for n, v in inputs.items()),
            sources=tuple(dict.fromkeys(sources + inherited)), flags=flags, missing=missing,
        )
        self.values[key] = val
        return val

    def record(self, key: str, value: Any, *, unit: str = "", doc: str, sources: tuple[str, ...] = (),
               missing: str | None = None) -> Value:
        """Store a raw observed value (a setting or a count read from a bundle), not a derivation."""
        if key in self.values:
            raise KeyError(f"ledger key {key!r} recorded twice")
        val = Value(key=key, value=value, unit=unit, func="observed", doc=doc, sources=sources,
                    missing=missing if value is None else None)
        self.values[key] = val
        return val

    def __getitem__(self, key: str) -> Value:
        try:
            return self.values[key]
        except KeyError:
            raise KeyError(f"no ledger key {key!r}") from None

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def value_of(self, key: str) -> Any:
        """The number at KEY, or None when the key is not there or its value is absent."""
        v = self.values.get(key)
        return v.value if v is not None and v.present else None

    def get(self, key: str) -> Value | None:
        return self.values.get(key)
