"""Whether a recorded plan may be resumed by the plan given now."""

from __future__ import annotations

from typing import Any

RESUME_FREE = {("source",), ("title",), ("expect",), ("slo",), ("cost",), ("engine", "endpoint"), ("engine", "port"),
               ("engine", "endpoints")}
# Plan keys a later version added, with the value that means what a plan without them ran.
ADDED_KEYS = {("engine", "endpoints"): [], ("engine", "commands"): [], ("client", "ray"): "",
              ("client", "nodes"): 0, ("client", "workers_per_node"): 1, ("sweep", "warmup_s"): 0.0}


def resume_problem(recorded: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why the plan NOW (as the manifest would record it) cannot continue a bundle recorded
    with the plan RECORDED, None when it can: every point of one bundle runs one workload, on as
    many servers, and a search sweep's points were chosen by one SLO."""
    def servers(plan: dict[str, Any]) -> int:
        return len((plan.get("engine") or {}).get("endpoints") or []) or 1
    if servers(recorded) != servers(now):
        return (f"--resume: the bundle was recorded against {servers(recorded)} server(s) and is given "
                f"{servers(now)} now; its engines' samples would not add up (record a new round)")
    if (recorded.get("sweep") or {}).get("search") and recorded.get("slo") != now.get("slo"):
        return (f"--resume: [slo] was {recorded.get('slo')!r:.80} when the search chose its points "
                f"and is {now.get('slo')!r:.80} now; a search continues under the SLO it started with")
    for section in sorted(set(recorded) | set(now)):
        a, b = recorded.get(section), now.get(section)
        if (section,) in RESUME_FREE or a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                was = a.get(key, ADDED_KEYS.get((section, key)))
                if (section, key) not in RESUME_FREE and was != b.get(key):
                    return (f"--resume: [{section}].{key} was {a.get(key)!r:.80} when the bundle "
                            f"was recorded and is {b.get(key)!r:.80} now; a resumed round runs "
                            "the plan it started with (record the change as a new round)")
            continue
        return (f"--resume: {section} was {a!r:.80} when the bundle was recorded and is "
                f"{b!r:.80} now; a resumed round runs the plan it started with")
    return None
