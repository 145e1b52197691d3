"""The Prometheus pages a round scrapes: the server's /metrics (metrics.jsonl) and, when the plan
names one, an NVIDIA DCGM exporter's page (dcgm.jsonl), each on a fixed grid."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from bench.exposition import parse_exposition
from bench.samplers.base import AT_SERVER, Context, Sampler, Signal
from bundle.metric_keys import ENDPOINT_LABEL, sample_key, split_key
from bundle.plausible import screen


class MetricsSampler(Sampler):
    """Scrapes a Prometheus page on a fixed grid (t0 + k·interval) and appends raw samples or
    gaps to STREAM: the server's /metrics, or a DCGM exporter's page (its full URL, URL).

    The round's endpoint gives one base URL, or a list of several (data parallel): each tick
    then scrapes them all at once into one record, every sample labelled `endpoint="k"` (k its
    index); the record is a gap, naming the endpoint, unless every one answered. Started once
    the round's first server answers; later restarts show up as gaps."""

    starts = AT_SERVER

    def __init__(self, interval_s: float, stream: str = "metrics", path: str = "/metrics",
                 prefix: str = "vllm:", url: str | None = None):
        self.interval_s, self.stream, self.path, self.prefix, self.url = (
            interval_s, stream, path, prefix, url)

    def bases(self, ctx: Context) -> str | list[str]:
        """The page's base URL (or each server's) this tick."""
        return self.url if self.url is not None else ctx.endpoint()

    async def _page(self, ctx: Context, base: str, limit: float) -> tuple[float, dict]:
        """When one page had been read (on the bundle's clock) and its samples; raises what stopped it."""
        timeout = aiohttp.ClientTimeout(total=limit)
        async with ctx.session.get(base + self.path, timeout=timeout) as r:
            text = await r.text()
            if r.status != 200:
                raise ValueError(f"HTTP {r.status}")
        return ctx.writer.now(), parse_exposition(text, self.prefix)

    async def scrape_once(self, ctx: Context) -> None:
        """One scrape: its raw samples, or a gap with the error."""
        w = ctx.writer
        t = w.now()
        rec: dict[str, Any] = {"t": t}
        limit = max(2.0, self.interval_s * 2)
        bases = self.bases(ctx)
        several = isinstance(bases, list)
        # Every page at once (one endpoint: one page); any exception is kept, not raised.
        pages = await asyncio.gather(*(self._page(ctx, b, limit)
                                       for b in (bases if several else [bases])),
                                     return_exceptions=True)
        failed = [(k, p) for k, p in enumerate(pages) if isinstance(p, BaseException)]
        if failed:
            k, e = failed[0]
            if isinstance(e, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                raise e
            error = (f"TimeoutError: no answer within {limit:g} s"
                     if isinstance(e, asyncio.TimeoutError) else f"{type(e).__name__}: {e}")
            # Any failed scrape is a gap (of every endpoint's samples); the round goes on.
            rec.update(dt=w.now() - t, ok=False,
                       error=(f"endpoint {k} ({bases[k]}): {error}" if several else error)[:300])
        else:
            # dt: until the last page was read (the parsing after it is not the scrape's).
            samples = (pages[0][1] if not several else
                       {labelled(key, k): v for k, (_, page) in enumerate(pages) for key, v in page.items()})
            # A sample that is no measurement (NaN, a negative power) is kept out, with why.
            samples, withheld = screen(samples)
            rec.update(dt=max(done for done, _ in pages) - t, ok=True, samples=samples)
            if withheld:
                rec["withheld"] = withheld
        w.append(self.stream, rec)

    async def sample(self, ctx: Context, stop: asyncio.Event) -> None:
        """Scrape until STOP is set, then once more so the last counters are in the bundle."""
        w = ctx.writer
        next_t = w.now()
        while not stop.is_set():
            await self.scrape_once(ctx)
            next_t += self.interval_s
            now = w.now()
            if next_t < now:  # fell behind: skip missed ticks rather than burst
                next_t = now + self.interval_s - ((now - next_t) % self.interval_s)
            try:
                await asyncio.wait_for(stop.wait(), timeout=next_t - now)
            except asyncio.TimeoutError:
                pass
        await self.scrape_once(ctx)


def labelled(key: str, k: int) -> str:
    """Sample KEY with the label `endpoint="K"` added (labels stay sorted by name)."""
    name, labels = split_key(key)
    return sample_key(name, {**labels, ENDPOINT_LABEL: str(k)})


def metrics_sampler(sampler: Any, gpus: bool) -> MetricsSampler | None:
    """The server's /metrics, unless the plan turns scraping off."""
    return MetricsSampler(sampler.metrics_interval_s) if sampler.metrics else None


def dcgm_sampler(sampler: Any, gpus: bool) -> MetricsSampler | None:
    """The remote GPUs' DCGM exporter the plan names, scraped on the /metrics clock."""
    if not (sampler.metrics and sampler.gpu_metrics):
        return None
    return MetricsSampler(sampler.metrics_interval_s, stream="dcgm", path="", prefix="DCGM_FI_",
                          url=sampler.gpu_metrics)


SIGNALS = (Signal("metrics", metrics_sampler), Signal("dcgm", dcgm_sampler))
