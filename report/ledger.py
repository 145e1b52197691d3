"""The ledger: every number the report prints, each with the function and samples behind it.

A derived quantity is a pure function named for what it returns, whose parameters name its
inputs. `Ledger.derive` calls it and records provenance: the function, its one-line
docstring, the input values (or the ledger keys they came from), the bundle files and
sample ranges, and sanity flags. When any input is absent the value is None with a reason,
never 0 or a guess. A reason is a code in the catalogue of words (report/data/words/reason.*.toml)
with its parameters, so each language words it from the code, not from another language's text.
"""

from __future__ import annotations

import inspect
import math
import re
import string
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from report.words import section, word


@dataclass(frozen=True)
class Reason:
    """Why a value is absent: a catalogue code (`reason.<key>`) and the parameters its texts fill.

    A parameter may itself be a Reason; it is worded in the same language as the reason around it.
    """

    code: str
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not self.code.startswith("reason."):
            raise ValueError(f"a reason code starts with 'reason.', not {self.code!r}")

    @classmethod
    def of(cls, code: str, **params: Any) -> Reason:
        return cls(code, tuple(params.items()))

    def param(self, name: str) -> Any:
        return dict(self.params)[name]

    def chain(self) -> tuple[list[str], Reason]:
        """The names of the absent inputs, innermost first, and the reason at the root of them."""
        names: list[str] = []
        r = self
        while r.code == "reason.input_absent":
            names.append(r.param("input"))
            r = r.param("cause")
        return names[::-1], r

    def text(self, lang: str = "en") -> str:
        """The reason in words in LANG."""
        if lang != "en" and self.code == "reason.input_absent":
            # Not "a absent: b absent: cause" but the root cause once, then the inputs it left absent.
            names, root = self.chain()
            return word(self.code, lang, input=" → ".join(names), cause=root.text(lang))
        params = {k: v.text(lang) if isinstance(v, Reason) else v for k, v in self.params}
        return word(self.code, lang, **params)

    def __str__(self) -> str:
        return self.text("en")


@dataclass(frozen=True)
class Source:
    """Where a value's samples are: a bundle file and, as a catalogue code (`source.<key>`) with
    parameters, which of its records. A parameter may be a Source without a file: a phrase
    worded in the same language."""

    file: str = ""
    code: str = ""
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, file: str, code: str = "", **params: Any) -> Source:
        if code and not code.startswith("source."):
            raise ValueError(f"a source code starts with 'source.', not {code!r}")
        return cls(file, code, tuple(params.items()))

    def text(self, lang: str = "en") -> str:
        """The source in words in LANG (file and record names stay as they are)."""
        what = word(self.code, lang, **{k: v.text(lang) if isinstance(v, Source) else v
                                        for k, v in self.params}) if self.code else ""
        if not self.file:
            return what
        return word("source.file_what", lang, file=self.file, what=what) if what else self.file

    def __str__(self) -> str:
        return self.text("en")


@dataclass(frozen=True)
class Value:
    """One ledger entry: a number (or None with a reason) and where it came from."""

    key: str
    value: Any
    unit: str = ""
    func: str = ""
    doc: str = ""
    inputs: tuple[tuple[str, str], ...] = ()
    sources: tuple[str | Source, ...] = ()
    flags: tuple[str, ...] = ()
    missing: Reason | None = None

    @property
    def present(self) -> bool:
        return self.value is not None


def reason_from_text(text: str, codes: tuple[str, ...]) -> Reason | None:
    """The reason among CODES whose English text is TEXT (fields read back as strings), or None.

    For reasons a bundle recorded as English text (the collector does not import the report).
    """
    for code in codes:
        template = section("reason", "en")[code.removeprefix("reason.")]
        pattern = "".join(re.escape(lit) + (f"(?P<{f}>.+?)" if f else "")
                          for lit, f, _, _ in string.Formatter().parse(template))
        m = re.fullmatch(pattern, text, re.S)
        if m:
            return Reason.of(code, **m.groupdict())
    return None


class Absent(Exception):
    """Raised by a quantity function when its inputs cannot give a value: `Absent(code, **params)`.

    `reason` holds the code and parameters; str() is the English text (for logs and errors).
    """

    def __init__(self, code: str, **params: Any) -> None:
        self.reason = Reason.of(code, **params)
        super().__init__(self.reason.text("en"))

    @classmethod
    def because(cls, reason: Reason) -> Absent:
        """Absent for a reason already in hand (a ledger value's)."""
        e = cls.__new__(cls)
        e.reason = reason
        Exception.__init__(e, reason.text("en"))
        return e


def quantity_name(func: str) -> str:
    """A `Value.func` without its package and stage: "report.derive.stats.samples.mean" -> "stats.samples.mean".

    Invariant (tests/unit/report/test_words_labels.py): module names are unique across the
    report's stages, so the short name still names one function.
    """
    return func.split(".", 2)[2] if func.startswith("report.") else func


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
    if isinstance(v, dict):  # a model config: its source names the file; the fields are many
        return f"{len(v)} fields"
    if type(v).__name__ == "ServerLogFacts":  # the server log's facts: its source names the file
        return f"{len(fields(v))} fields"
    return str(v)


@dataclass
class Ledger:
    """All values of one report, keyed by a dotted name, in insertion order."""

    values: dict[str, Value] = field(default_factory=dict)

    def derive(self, key: str, func: Callable, *, unit: str = "", sources: tuple[str, ...] = (),
               flags: tuple[str, ...] = (), optional: frozenset[str] = frozenset(),
               **inputs: Any) -> Value:
        """Compute func(**inputs), unwrapping Values, and store it under KEY with provenance.

        An absent input makes the value absent, unless its name is in OPTIONAL: then None is passed.
        """
        if key in self.values:
            raise KeyError(f"ledger key {key!r} computed twice")
        missing = None
        kwargs = {}
        for name, v in inputs.items():
            if name in optional and (v is None or isinstance(v, Value) and not v.present):
                kwargs[name] = None
            elif isinstance(v, Value):
                if not v.present:
                    missing = Reason.of("reason.input_absent", input=name,
                                        cause=v.missing or Reason.of("reason.no_reason"))
                    break
                kwargs[name] = v.value
            elif v is None:
                missing = Reason.of("reason.input_none", input=name)
                break
            else:
                kwargs[name] = v
        result = None
        if missing is None:
            try:
                result = func(**kwargs)
            except Absent as e:
                missing = e.reason
            if isinstance(result, float) and not math.isfinite(result):
                missing, result = Reason.of("reason.undefined", func=func.__name__), None
        # A value cites what it used: an optional input left absent (passed as None) is not cited.
        inherited = tuple(s for n, v in inputs.items() if isinstance(v, Value)
                          and not (n in optional and not v.present) for s in v.sources)
        val = Value(
            key=key, value=result, unit=unit, func=f"{func.__module__}.{func.__qualname__}",
            doc=doc_line(func),
            inputs=tuple((n, _describe(v)) for n, v in inputs.items()),
            sources=tuple(dict.fromkeys(sources + inherited)), flags=flags, missing=missing,
        )
        self.values[key] = val
        return val

    def record(self, key: str, value: Any, *, unit: str = "", doc: str, sources: tuple[str, ...] = (),
               missing: Reason | None = None) -> Value:
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
