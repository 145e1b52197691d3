"""Other tools' result files, read beside a round: which tool wrote one, and what it states.

Three formats, each read by the fields its own code defines (docs/peers.md names them):

- `vllm bench serve --save-result` (vllm/benchmarks/serve.py): one run; `max_concurrency`,
  `request_rate` ("inf" or a number), `duration`, `completed`, `total_input_tokens`,
  `total_output_tokens`, `output_throughput` and `{median,p99}_{ttft,itl,tpot}_ms`.
- GuideLLM's benchmarks report (`guidellm benchmark --output-path x.json`): `benchmarks[i]`,
  each with `config.strategy` (`type_`, `streams`, `rate`) and
  `metrics.<name>.successful.{mean,percentiles.{p50,p99}}`; lengths from `config.spec.data[0]`
  (report schema v2) or `args.data[0]` (v1).
- AIPerf's aggregated export (`profile_export_aiperf.json`): a block per metric with its
  `unit`, `avg`, `p50`, `p99`; the load from `input_config.loadgen`.

A file is only read (bounded, a regular file, UTF-8 JSON): never written. Anything else is a
PeerFileError whose message is one line naming the file and why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle.files import BundleError, run_dir
from bundle.textfile import read_text_file

# A result file larger than this is no summary these tools write (their per-request arrays
# included, vllm's --save-detailed for a long run stays well under it).
MAX_BYTES = 64 * 2**20
# Deeper than this, a JSON value is not one of these formats (GuideLLM nests about 8 deep).
MAX_DEPTH = 32

VLLM, GUIDELLM, AIPERF = "vllm-bench-serve", "guidellm", "aiperf"
FORMATS = (VLLM, GUIDELLM, AIPERF)
# How each tool defines what it calls ITL and TPOT (docs/peers.md):
#   per_chunk        the gap between consecutive stream events, one sample per gap (vLLM's ITL)
#   per_request      (last token − first token)/(tokens − 1), one sample per request (vLLM's
#                    TPOT; GuideLLM's and AIPerf's ITL)
#   per_request_all  (last token − send)/tokens, first token included (GuideLLM's TPOT)
DEFINITIONS = {VLLM: {"itl": "per_chunk", "tpot": "per_request"},
               GUIDELLM: {"itl": "per_request", "tpot": "per_request_all"},
               AIPERF: {"itl": "per_request"}}
# The numbers a result is compared on, in ms (latencies) or tokens per second.
METRICS = ("output_tok_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99",
           "tpot_ms_p50", "tpot_ms_p99")


class PeerFileError(BundleError):
    """A file that is not a result of a tool this report reads; the message names it."""


@dataclass(frozen=True)
class PeerResult:
    """One run another tool reported: its load, lengths, how it started and counted, its numbers."""

    path: str                   # the file as given
    tool: str                   # one of FORMATS
    index: int = 0              # which benchmark of the file (GuideLLM's hold several)
    concurrency: int | None = None      # streams in a closed loop (or a cap), None: not stated
    request_rate: float | None = None   # requests per second of an open loop; None: as fast as allowed
    input_len: float | None = None      # prompt tokens: the requested length, else the mean sent
    output_len: float | None = None     # output tokens: likewise
    # Whether every stream started at once (True), spread (False) or not stated (None).
    starts_together: bool | None = None
    duration_s: float | None = None
    completed: int | None = None
    values: dict[str, float] = field(default_factory=dict)     # METRICS the file states
    version: str = ""           # the tool's own version where the file states it

    def __repr__(self) -> str:
        # How a ledger value's inputs name it: the tool and the file's name, never the path as
        # given (which depends on where the command ran).
        return f"{self.tool}: {self.name}"

    @property
    def name(self) -> str:
        """The file's name, with the benchmark's index where the file holds several."""
        return Path(self.path).name + (f"#{self.index}" if self.tool == GUIDELLM else "")


def _depth_ok(value: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_depth_ok(v, depth + 1) for v in value)
    return True


def _num(value: Any) -> float | None:
    """VALUE as a finite float, or None (absent, null, text, NaN, infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _get(d: Any, *path: Any) -> Any:
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and isinstance(p, int) and -len(d) <= p < len(d):
            d = d[p]
        else:
            return None
    return d


def detect(data: Any) -> str | None:
    """Which tool wrote DATA (a parsed JSON value), or None when none of FORMATS."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("benchmarks"), list) and data["benchmarks"] and all(
            isinstance(b, dict) and isinstance(b.get("metrics"), dict) for b in data["benchmarks"]):
        return GUIDELLM
    if "output_throughput" in data and "duration" in data and "completed" in data:
        return VLLM
    if isinstance(data.get("time_to_first_token"), dict) and (
            "input_config" in data or isinstance(data.get("request_latency"), dict)):
        return AIPERF
    return None


def read_peer_file(path: str | Path) -> list[PeerResult]:
    """Every run the result file PATH states (GuideLLM's: one per benchmark); PeerFileError for
    a file that is not one of FORMATS or lacks what a comparison needs."""
    where = str(path)
    text = read_text_file(path, where, MAX_BYTES, PeerFileError)
    try:
        data = json.loads(text)
    except RecursionError:
        raise PeerFileError(f"{where}: nested deeper than {MAX_DEPTH} levels; not a result file") from None
    except ValueError as e:
        raise PeerFileError(f"{where}: not JSON ({' '.join(str(e).split())})") from None
    if not _depth_ok(data):
        raise PeerFileError(f"{where}: nested deeper than {MAX_DEPTH} levels; not a result file")
    tool = detect(data)
    if tool is None:
        raise PeerFileError(f"{where}: not a result file of {', '.join(FORMATS)} (no field that "
                            "names one: output_throughput/duration/completed, benchmarks[].metrics, "
                            "or time_to_first_token with input_config)")
    results = {VLLM: _vllm, GUIDELLM: _guidellm, AIPERF: _aiperf}[tool](data, where)
    for r in results:
        if not r.values:
            raise PeerFileError(f"{where}: a {tool} result without any of throughput, TTFT, ITL or TPOT")
    return results


def _vllm(d: dict, where: str) -> list[PeerResult]:
    """`vllm bench serve --save-result`: one run (vllm/benchmarks/serve.py, `benchmark`'s result dict)."""
    completed = d.get("completed")
    if not isinstance(completed, int) or isinstance(completed, bool) or completed < 0:
        raise PeerFileError(f"{where}: vllm bench serve result: `completed` is not a count ({completed!r})")
    rate = d.get("request_rate")
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        rate = None
    elif _num(rate) is None or rate <= 0:
        raise PeerFileError(f"{where}: vllm bench serve result: `request_rate` is {rate!r}, not a rate or \"inf\"")
    conc = d.get("max_concurrency")
    if conc is not None and (not isinstance(conc, int) or isinstance(conc, bool) or conc < 1):
        raise PeerFileError(f"{where}: vllm bench serve result: `max_concurrency` is {conc!r}, not a count")
    n = completed or None
    # A run as fast as allowed under a concurrency cap sends C requests at once and a new one
    # as each ends: every stream starts together (the benchmark's `limited_request_func`).
    together = True if rate is None and conc else (False if rate is not None else None)
    values = {"output_tok_s": _num(d.get("output_throughput")),
              "ttft_ms_p50": _num(d.get("median_ttft_ms")), "ttft_ms_p99": _num(d.get("p99_ttft_ms")),
              "itl_ms_p50": _num(d.get("median_itl_ms")), "itl_ms_p99": _num(d.get("p99_itl_ms")),
              "tpot_ms_p50": _num(d.get("median_tpot_ms")), "tpot_ms_p99": _num(d.get("p99_tpot_ms"))}
    tin, tout = _num(d.get("total_input_tokens")), _num(d.get("total_output_tokens"))
    return [PeerResult(path=where, tool=VLLM, concurrency=conc, request_rate=_num(rate),
                       input_len=tin / n if n and tin is not None else None,
                       output_len=tout / n if n and tout is not None else None,
                       starts_together=together, duration_s=_num(d.get("duration")), completed=completed,
                       values={k: v for k, v in values.items() if v is not None},
                       version=str(d.get("vllm_version") or ""))]


def _guidellm_lengths(d: dict) -> tuple[float | None, float | None]:
    """The first dataset's prompt and output tokens: `config.spec.data[0]` (report schema v2,
    a dict) or `args.data[0]` (v1, `prompt_tokens=…,output_tokens=…` or JSON)."""
    first = _get(d, "config", "spec", "data", 0)
    if first is None:
        first = _get(d, "args", "data", 0)
    if isinstance(first, str):
        try:
            first = json.loads(first)
        except ValueError:
            first = dict(kv.split("=", 1) for kv in first.split(",") if "=" in kv)
    if not isinstance(first, dict):
        return None, None

    def length(key: str) -> float | None:
        v = first.get(key)
        try:
            return _num(float(v)) if isinstance(v, str) else _num(v)
        except ValueError:
            return None
    return length("prompt_tokens"), length("output_tokens")


def _guidellm(d: dict, where: str) -> list[PeerResult]:
    """GuideLLM's report: one result per benchmark (`benchmarks[i].metrics.*.successful`)."""
    lin, lout = _guidellm_lengths(d)
    out = []
    for i, b in enumerate(d["benchmarks"]):
        strat = _get(b, "config", "strategy") or {}
        kind = strat.get("type_") if isinstance(strat, dict) else None
        conc = rate = None
        if kind == "synchronous":
            conc = 1
        elif kind == "concurrent":
            conc = strat.get("streams", strat.get("max_concurrency"))
        elif kind in ("constant", "poisson", "async"):
            rate = _num(strat.get("rate"))
        elif kind == "throughput":
            conc = strat.get("max_concurrency")
        if conc is not None and (not isinstance(conc, int) or isinstance(conc, bool) or conc < 1):
            raise PeerFileError(f"{where}: GuideLLM benchmark {i}: streams {conc!r} is not a count")

        def stat(name: str, which: str, b: dict = b) -> float | None:
            s = _get(b, "metrics", name, "successful")
            return _num(s.get("mean")) if which == "mean" and isinstance(s, dict) else \
                _num(_get(s, "percentiles", which))
        values = {"output_tok_s": stat("output_tokens_per_second", "mean"),
                  "ttft_ms_p50": stat("time_to_first_token_ms", "p50"),
                  "ttft_ms_p99": stat("time_to_first_token_ms", "p99"),
                  "itl_ms_p50": stat("inter_token_latency_ms", "p50"),
                  "itl_ms_p99": stat("inter_token_latency_ms", "p99"),
                  "tpot_ms_p50": stat("time_per_output_token_ms", "p50"),
                  "tpot_ms_p99": stat("time_per_output_token_ms", "p99")}
        totals = _get(b, "metrics", "request_totals", "successful")
        out.append(PeerResult(path=where, tool=GUIDELLM, index=i, concurrency=conc, request_rate=rate,
                              input_len=lin, output_len=lout,
                              starts_together=True if kind in ("concurrent", "synchronous") else None,
                              duration_s=_num(b.get("duration")),
                              completed=totals if isinstance(totals, int) and not isinstance(totals, bool) else None,
                              values={k: v for k, v in values.items() if v is not None},
                              version=str(_get(d, "metadata", "guidellm_version") or "")))
    return out


def _aiperf(d: dict, where: str) -> list[PeerResult]:
    """AIPerf's `profile_export_aiperf.json`: one run, a block per metric (`avg`, `p50`, `p99`, `unit`)."""
    def stat(name: str, which: str) -> float | None:
        block = d.get(name)
        if not isinstance(block, dict):
            return None
        v = _num(block.get(which))
        unit = block.get("unit")
        # Latencies are stated in ms by default; a block in another unit is converted, or left out.
        if v is not None and name != "output_token_throughput" and unit not in (None, "ms"):
            scale = {"s": 1e3, "us": 1e-3, "ns": 1e-6}.get(unit)
            return v * scale if scale else None
        return v
    load = _get(d, "input_config", "loadgen") or {}
    conc = load.get("concurrency") if isinstance(load, dict) else None
    if conc is not None and (not isinstance(conc, int) or isinstance(conc, bool) or conc < 1):
        raise PeerFileError(f"{where}: AIPerf export: loadgen.concurrency {conc!r} is not a count")
    rate = _num(load.get("request_rate")) if isinstance(load, dict) else None
    values = {"output_tok_s": stat("output_token_throughput", "avg"),
              "ttft_ms_p50": stat("time_to_first_token", "p50"),
              "ttft_ms_p99": stat("time_to_first_token", "p99"),
              "itl_ms_p50": stat("inter_token_latency", "p50"),
              "itl_ms_p99": stat("inter_token_latency", "p99")}
    count = _num(_get(d, "request_count", "avg"))
    return [PeerResult(path=where, tool=AIPERF, concurrency=conc, request_rate=rate,
                       input_len=_num(_get(d, "input_sequence_length", "avg")),
                       output_len=_num(_get(d, "output_sequence_length", "avg")),
                       starts_together=None, duration_s=_num(_get(d, "benchmark_duration", "avg")),
                       completed=int(count) if count is not None else None,
                       values={k: v for k, v in values.items() if v is not None})]


def external_dir(bundle_dir: str | Path) -> Path:
    """Where a round keeps other tools' results: external/ beside its bundle/."""
    return run_dir(bundle_dir) / "external"


def round_peer_files(bundle_dir: str | Path, given: tuple[str, ...] = ()) -> list[str]:
    """The result files read beside a round: its external/*.json (by name), then those GIVEN."""
    ext = external_dir(bundle_dir)
    own = sorted(str(p) for p in ext.glob("*.json")) if ext.is_dir() else []
    return own + [str(g) for g in given if str(g) not in own]


def read_peer_files(files: list[str]) -> list[PeerResult]:
    """Every run the FILES state, in their order; the first file that cannot be read raises."""
    return [r for f in files for r in read_peer_file(f)]
