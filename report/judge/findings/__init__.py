"""The report's conclusions: a finding and how its sentence is made (finding), the points' (points), the round's (round)."""
