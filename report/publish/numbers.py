"""How a ledger Value is printed: digits, thousands separators, percent, unit, missing reason.

Plain text only; the HTML/PDF markup around a number (popup, superscript id) lives in
report/publish/render/ and the templates. A Value with value None is never printed as 0: it becomes a
sentence in the page's language that gives the ledger's reason.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from report.ledger import Ledger, Reason, Value
from report.words import PLACEHOLDER, closed, has, word

# Units a fraction may carry; pct=True multiplies these by 100 and prints "%".
FRACTION_UNITS = ("", "fraction", "ratio", "share")
# A fraction at or above this prints as a multiple (×), not a percentage.
PCT_AS_TIMES = 10.0
# Percentages print at most this many decimals; a nonzero one below PCT_FLOOR prints "<0.01 %".
PCT_MAX_DIGITS, PCT_FLOOR = 2, 0.01
# Units printed with an SI prefix from a million up (16.5 PFLOP, not 16,543,979,824,103,424 FLOP).
SI_UNITS = ("FLOP", "B", "B/s")
SI_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"))
# Units that count whole things: a whole value of one prints without decimals ("53 req", not
# "53.0 req") unless the use asks for digits.
COUNT_UNITS = ("tok", "tokens", "req", "blocks")
# A Ray node id's leading hex digits a row label prints (as `ray status` does).
NODE_ID_SHOWN = 8

@dataclass(frozen=True)
class Format:
    """How one use of a number asked to be printed (n()'s keyword arguments)."""

    digits: int | None = None
    pct: bool = False
    unit: bool = True
    sign: bool = False


def auto_digits(x: float) -> int:
    """Decimals that keep about three significant figures, none at 100 and above."""
    a = abs(x)
    if a == 0 or a >= 100:
        return 0
    if a >= 10:
        return 1
    if a >= 1:
        return 2
    return min(6, 2 - math.floor(math.log10(a)))


def si_scaled(x: float, unit: str) -> tuple[float, str]:
    """X in UNIT with the largest SI prefix it reaches: (16.54, "PFLOP") for 1.654e16 FLOP."""
    for scale, prefix in SI_PREFIXES:
        if abs(x) >= scale:
            return x / scale, prefix + unit
    return x, unit


def format_number(x: float | int, digits: int | None = None, sign: bool = False) -> str:
    """A number with thousands separators and DIGITS decimals (automatic when None)."""
    plus = "+" if sign else ""
    if isinstance(x, numbers.Integral) and digits in (None, 0):
        return f"{int(x):{plus},d}"
    x = float(x)
    d = auto_digits(x) if digits is None else digits
    s = f"{x:{plus},.{d}f}"
    if s.lstrip("+-").strip("0.,") == "" and s[0] == "-":
        s = s[1:]  # "-0.0" after rounding prints as "0.0"
    return s


def unit_text(unit: str, lang: str = "en") -> str:
    """The unit as printed after a number in LANG: "%" hugs it, others follow a space; a unit
    the catalogue names (`label.unit_<unit>`) is written as that language writes it
    ("200 tok", "200 个 token")."""
    if not unit:
        return ""
    if has(f"label.unit_{unit}", lang):
        return word(f"label.unit_{unit}", lang)
    return unit if unit in ("%", "×", "x") else " " + unit


def unit_heading(unit: str, lang: str) -> str:
    """The unit as printed in a column heading, without a number (`label.unit_head_<unit>`)."""
    return word(f"label.unit_head_{unit}", lang) if has(f"label.unit_head_{unit}", lang) else unit


def missing_text(value: Value, lang: str, short: bool = False) -> str:
    """The sentence printed in place of an absent value."""
    if short:
        return word("label.value_missing_short", lang)
    return word("label.value_missing", lang,
                reason=(value.missing or Reason.of("reason.no_reason")).text(lang))


def absent(value: Value) -> bool:
    """True when VALUE has no number to print (None, or a NaN/inf that slipped in)."""
    x = value.value
    if x is None:
        return True
    return (isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral)
            and not math.isfinite(x))


def missing_reason(value: Value) -> Reason | None:
    """Why VALUE has no number (None when it has one)."""
    if not absent(value):
        return None
    if value.value is not None:
        return Reason.of("reason.not_a_number", value=value.value)
    return value.missing or Reason.of("reason.no_reason")


def format_parts(value: Value, lang: str, fmt: Format = Format(),
                 short_missing: bool = False) -> tuple[str, str]:
    """The number and the unit of VALUE as printed (unit "" when hidden or absent)."""
    if value.value is not None and absent(value):
        value = Value(value.key, None, missing=missing_reason(value))
    if value.value is None:
        return missing_text(value, lang, short=short_missing), ""
    x = value.value
    if isinstance(x, bool):
        if fmt.pct:
            raise ValueError(f"{value.key}: pct=True on a yes/no value")
        return word("label.value_true" if x else "label.value_false", lang), ""
    unit = value.unit
    if isinstance(x, numbers.Real):
        digits = fmt.digits
        if fmt.pct:
            if unit == "%":
                raise ValueError(f"{value.key} is already in percent; drop pct=True")
            if unit not in FRACTION_UNITS:
                raise ValueError(f"{value.key} has unit {unit!r}; pct=True needs a fraction")
            if abs(float(x)) >= PCT_AS_TIMES:
                unit = "×"           # 6,661 % reads as 66.6×
            else:
                x, unit = float(x) * 100.0, "%"
                if digits is None:
                    if x and abs(x) < PCT_FLOOR:
                        return f"<{PCT_FLOOR:g}", (unit_text(unit, lang) if fmt.unit else "")
                    digits = min(auto_digits(x), PCT_MAX_DIGITS)
        elif digits is None and unit in COUNT_UNITS and float(x).is_integer():
            x = int(x)
        elif digits is None and unit in SI_UNITS and abs(float(x)) >= 1e6:
            x, unit = si_scaled(float(x), unit)
        text = format_number(x, digits, fmt.sign)
    elif fmt.pct or fmt.digits is not None or fmt.sign:
        raise ValueError(f"{value.key} is not a number ({type(x).__name__}); "
                         "digits/pct/sign do not apply")
    else:
        text = str(x)
    return text, (unit_text(unit, lang) if fmt.unit else "")


def format_value(value: Value, lang: str, fmt: Format = Format(), short_missing: bool = False) -> str:
    """The text of VALUE as it appears on the page (without markup)."""
    return "".join(format_parts(value, lang, fmt, short_missing))


def raw_text(value: Value) -> str:
    """The stored value at full useful precision, for the provenance appendix."""
    x = value.value
    if x is None:
        return ""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    return f"{float(x):.6g}"


def why_text(value: Value, lang: str) -> str:
    """Why VALUE is absent, as a sentence about the absence says it: the root cause alone (the
    inputs it left absent on the way are the appendix's to list)."""
    return missing_reason(value).chain()[1].text(lang)


def placeholder_format(spec: str | None) -> Format:
    """How a [[key|SPEC]] placeholder prints: pct, signed pct (spct), a count (int) or as is
    (`why`, the reason an absent value is absent, is printed by the caller)."""
    return Format(pct=spec in ("pct", "pct0", "spct"), sign=spec == "spct",
                  digits=0 if spec in ("int", "pct0") else None, unit=spec != "int")


def plain_text(text: str, led: Ledger, lang: str) -> str:
    """TEXT with every [[key]] replaced by its formatted value (for the command line and the
    JSON), its gaps between two Chinese characters closed as on the page."""
    def one(m: re.Match) -> str:
        value = led[m.group(1)]
        if m.group(2) == "why" and absent(value):
            return why_text(value, lang)
        return format_value(value, lang, placeholder_format(m.group(2)))
    return closed(PLACEHOLDER.sub(one, text))
