"""Host CPU samples from /proc: the host's busy time, the engine's process group, the client.

Each sample holds cumulative CPU seconds (raw counters, never rates): the report differences
them over a point's window. The engine is the process group the launcher started (every
engine process: the API server, the engine core, their workers); an engine it did not start
has no group here and its field is left out.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from bench.samplers.base import AT_ROUND, Context, Sampler, Signal

TICKS = os.sysconf("SC_CLK_TCK")
# Host CPU is sampled at least this often (the /metrics interval, where shorter): a short
# point still gets two samples.
HOST_INTERVAL_S = 0.5


def host_cpu_seconds(proc: Path = Path("/proc")) -> tuple[float, float]:
    """(busy, total) CPU seconds of every core since boot, from the first line of /proc/stat."""
    fields = (proc / "stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)    # idle + iowait
    total = sum(ticks[:8])                                   # guest time is inside user
    return (total - idle) / TICKS, total / TICKS


def _stat_fields(text: str) -> list[str]:
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return text[text.rindex(")") + 2:].split()


def group_cpu_seconds(pgid: int, proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds of every live process in process group PGID."""
    total = 0
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = _stat_fields((d / "stat").read_text())
        except (OSError, ValueError):
            continue                                         # the process ended meanwhile
        if int(f[2]) == pgid:                                # f[0] is field 3 (state)
            total += int(f[11]) + int(f[12])                 # utime, stime (fields 14, 15)
    return total / TICKS


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process (the client)."""
    t = os.times()
    return t.user + t.system


def runqueue_wait_seconds(pid: int | None = None, proc: Path = Path("/proc")) -> float | None:
    """Seconds process PID's main thread (the client's event loop) spent runnable but not
    running, since it started: the second field of /proc/PID/schedstat; None where the kernel
    keeps no scheduler statistics."""
    try:
        return int((proc / str(pid or os.getpid()) / "schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def host_sample(t: float, engine_pgid: int | list[int] | None) -> dict[str, Any]:
    """One host.jsonl record; ENGINE_PGID is the engine's process group, or each server's of a
    round against several (their CPU seconds summed)."""
    busy, total = host_cpu_seconds()
    rec: dict[str, Any] = {"t": t, "cores": os.cpu_count() or 1, "cpu_busy_s": busy,
                           "cpu_total_s": total, "client_cpu_s": own_cpu_seconds()}
    wait = runqueue_wait_seconds()
    if wait is not None:
        rec["client_wait_s"] = wait
    if isinstance(engine_pgid, list):
        if engine_pgid:
            rec["engine_cpu_s"] = sum(group_cpu_seconds(g) for g in engine_pgid)
    elif engine_pgid is not None:
        rec["engine_cpu_s"] = group_cpu_seconds(engine_pgid)
    return rec


class HostSampler(Sampler):
    """A host sample (host.jsonl) every INTERVAL_S, the engine's CPU seconds from the round's
    engine process groups; nothing where /proc/stat is not there."""

    stream, starts = "host", AT_ROUND

    def __init__(self, interval_s: float = HOST_INTERVAL_S) -> None:
        self.interval_s = interval_s

    async def sample(self, ctx: Context, stop: asyncio.Event) -> None:
        """Append a host sample every interval until STOP."""
        if not Path("/proc/stat").exists():
            return
        writer = ctx.writer
        while not stop.is_set():
            writer.append(self.stream, await asyncio.to_thread(host_sample, writer.now(),
                                                               ctx.engine_groups()))
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                pass


def host_sampler(sampler: Any, gpus: bool) -> HostSampler:
    """The host's CPU seconds in every round, at the /metrics interval where it is shorter."""
    return HostSampler(min(sampler.metrics_interval_s, HOST_INTERVAL_S))


SIGNALS = (Signal("host", host_sampler),)
