"""Every ledger key a narrative template names exists in a ledger of the recorded rounds
(runs/round-1..5, composed as the site composes them, round 9, whose requests bring their
own lengths, and the two-node Ray fixture, whose keys only a Ray round has; about a minute on two
cores)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.unit.report.test_templates import LANGS, key_literals, sections


def test_every_template_key_exists_in_a_real_ledger():
    """Keys named in templates exist in the ledgers built from the recorded rounds."""
    from report.publish.compose import compose_rounds
    bundles = [(ROOT / "runs" / f"round-{n}" / "bundle", f"round-{n}") for n in (1, 2, 3, 4, 5)]
    bundles = [(b, r) for b, r in bundles if (b / "manifest.json").exists()]
    if len(bundles) < 5:
        pytest.skip("the recorded rounds are not in runs/")
    reports = compose_rounds(bundles)
    own = ROOT / "runs" / "round-9" / "bundle"
    if (own / "manifest.json").exists():
        reports += compose_rounds([(own, "round-9")])
    reports += compose_rounds([(ROOT / "tests" / "fixtures" / "ray-two-nodes", "ray-two-nodes")])
    full, suffixes = set(), set()
    for rep in reports:
        for key in rep.ledger.values:
            full.add(key)
            if key.startswith("p."):
                suffixes.add(key.split(".", 2)[2])
    missing = []
    for lang in LANGS:
        for p in sections(lang):
            for k in key_literals(p):
                known = k in full if k.startswith(("r.", "x.", "p.")) else k in suffixes
                if not known:
                    missing.append(f"{lang}/{p.name}: {k}")
    assert not missing, "template keys no ledger has:\n" + "\n".join(missing)
