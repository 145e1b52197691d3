"""The round's facts are one typed object, built once by compose and never changed after."""

from __future__ import annotations

import dataclasses

import pytest

from report.publish.compose import compose_round
from report.publish.document import RoundFacts
from tests.conftest import FIXTURES


def test_the_facts_are_typed_and_frozen():
    report = compose_round(FIXTURES / "cpu-demo", "demo")
    facts = report.facts
    assert isinstance(facts, RoundFacts)
    assert facts.headline_point in facts.ok_points and facts.point_labels[facts.headline_point]
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.headline_point = "elsewhere"
    # a fact the type does not declare cannot be made up on the way
    with pytest.raises(TypeError):
        RoundFacts(no_such_fact=1)
