"""The verdicts of a bundle held against the truth its plan states (`[expect]`), point by point.

A plan that forces a cause by construction says what each point must be judged: the
bottleneck the cause must get, verdicts that must stay silent, validity checks that must fail,
whether the point must pass every check. A row per expectation, and a confusion table of
expected against judged bottlenecks over every bundle given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from bundle.expect import expect_of_plan_file
from report.judge.diagnosis import BOTTLENECKS, VALIDITY_CODES


@dataclass(frozen=True)
class Check:
    """One expectation of one point and what the report judged."""

    bundle: str
    point: str
    kind: str          # bottleneck | not | invalid | valid
    expected: str
    got: str
    holds: bool
    why: str
    holdout: bool = False     # a case kept out of tuning the rules (`holdout = true`)


def point_checks(bundle: str, point: str, expect: dict, valid: bool, reasons: list[str],
                 bottleneck: str) -> list[Check]:
    """Every expectation of one point against its judged validity reasons and bottleneck."""
    why = expect.get("why", "")
    got_reasons = ",".join(reasons) or "valid"
    out = []
    # A code the report cannot give would make its check hold for nothing: refused as a check.
    named = [expect.get("bottleneck")] if "bottleneck" in expect else []
    for code in named + list(expect.get("not", [])) + list(expect.get("invalid", [])):
        if code not in BOTTLENECKS and code not in VALIDITY_CODES:
            out.append(Check(bundle, point, "unknown code", code, "-", False, why))
    if "bottleneck" in expect:
        out.append(Check(bundle, point, "bottleneck", expect["bottleneck"], bottleneck,
                         bottleneck == expect["bottleneck"], why))
    for code in expect.get("not", []):
        judged = bottleneck if code in BOTTLENECKS else got_reasons
        hit = bottleneck == code if code in BOTTLENECKS else code in reasons
        out.append(Check(bundle, point, "not", code, judged, not hit, why))
    for code in expect.get("invalid", []):
        out.append(Check(bundle, point, "invalid", code, got_reasons, code in reasons, why))
    if "valid" in expect:
        out.append(Check(bundle, point, "valid", str(expect["valid"]).lower(), got_reasons,
                         valid == expect["valid"], why))
    return out


def plan_expectations(bundle_dir: Path) -> dict:
    """The [expect] table of the plan beside the bundle (`<run>/plan.toml`, where the truth is
    kept and corrected), else of the plan recorded in its manifest."""
    plan = bundle_dir.parent / "plan.toml"
    if bundle_dir.name == "bundle" and plan.exists():
        return expect_of_plan_file(plan)
    manifest = json.loads((bundle_dir / "manifest.json").read_text(encoding="utf-8"))
    return (manifest.get("plan") or {}).get("expect") or {}


def bundle_checks(path: Path) -> list[Check]:
    """The checks of every point of the bundle at PATH that its plan's [expect] names."""
    from report.judge.verdicts import read_bundle_ledger
    rd, _ = read_bundle_ledger(path)
    expect = plan_expectations(Path(rd.bundle.path))
    validity, attribution = rd.verdicts.validity, rd.verdicts.attribution
    out = []
    for pid, exp in expect.items():
        if pid not in validity:
            out.append(Check(rd.name, pid, "recorded", "point", "absent", False, exp.get("why", "")))
            continue
        v = validity[pid]
        checks = point_checks(rd.name, pid, exp, v.valid, v.reasons, attribution[pid].bottleneck)
        out += [replace(c, holdout=True) for c in checks] if exp.get("holdout") else checks
    return out


def confusion(checks: list[Check]) -> dict[tuple[str, str], int]:
    """(expected bottleneck, judged bottleneck) -> count, over the bottleneck expectations."""
    out: dict[tuple[str, str], int] = {}
    for c in checks:
        if c.kind == "bottleneck":
            out[(c.expected, c.got)] = out.get((c.expected, c.got), 0) + 1
    return out


def checks_table(checks: list[Check]) -> str:
    """The checks as a plain-text table, one row each."""
    rows = [("bundle", "point", "expects", "", "judged", "holds", "")]
    rows += [(c.bundle, c.point, c.kind, c.expected, c.got, "yes" if c.holds else "NO",
              "held out" if c.holdout else "") for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows)


def confusion_table(checks: list[Check]) -> str:
    """Expected bottlenecks (rows) against judged ones (columns), as plain text."""
    m = confusion(checks)
    exp = sorted({e for e, _ in m})
    got = sorted({g for _, g in m})
    if not exp:
        return "(no bottleneck expectations)"
    head = ["expected \\ judged"] + got
    rows = [head] + [[e] + [str(m.get((e, g), 0) or ".") for g in got] for e in exp]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in
                               enumerate(zip(r, widths))) for r in rows)
