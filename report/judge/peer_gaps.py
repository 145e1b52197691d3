"""Each other tool's result against the point it ran: which of our quantities each of its numbers
compares with, and why they differ, by definition (docs/peers.md).

What each tool calls ITL and TPOT differs; the table of a point prints ours, theirs, and ours
counted the way that tool counts (SAME_DEFINITION). A sentence that states a relation (a
whole-run count that explains a throughput gap, a client that read events together, streams
started together that keep prefills out of the ITL tail) is emitted only when the ledger
values behind it hold it, and only when every value it cites is present.
"""

from __future__ import annotations

from dataclasses import dataclass

from bundle.peers import DEFINITIONS, VLLM, PeerResult
from report.derive import validity as V
from report.derive.round.read import RoundData, ok_points, peer_id, peer_matches
from report.judge.findings.finding import Finding, catalogue_texts, make_finding
from report.ledger import Ledger
from report.words import LANGS, word

# Our quantity beside each of their numbers (metric -> our key's name): ours as we define it.
OURS = {"output_tok_s": "output_tok_s", "ttft_ms_p50": "ttft_ms_p50", "ttft_ms_p99": "ttft_ms_p99",
        "itl_ms_p50": "itl_ms_p50", "itl_ms_p99": "itl_ms_p99",
        "tpot_ms_p50": "tpot_ms_p50", "tpot_ms_p99": "tpot_ms_p99"}
# Ours counted as each definition counts (bundle.peers.DEFINITIONS): per stream event, per
# request, per request with the first token.
BY_DEFINITION = {"per_chunk": ("chunk_itl_ms_p50", "chunk_itl_ms_p99"),
                 "per_request": ("tpot_ms_p50", "tpot_ms_p99"),
                 "per_request_all": ("tpot_with_first_ms_p50", "tpot_with_first_ms_p99")}


def same_definition(tool: str) -> dict[str, str]:
    """Our quantity counted the way TOOL counts each of its numbers (metric -> our key's name)."""
    out = {"output_tok_s": "whole_run_output_tok_s", "ttft_ms_p50": "ttft_ms_p50", "ttft_ms_p99": "ttft_ms_p99"}
    for m, how in DEFINITIONS[tool].items():
        p50, p99 = BY_DEFINITION[how]
        out[f"{m}_ms_p50"], out[f"{m}_ms_p99"] = p50, p99
    return out


@dataclass(frozen=True)
class PeerMatch:
    """One other tool's result beside the point it ran: the point, its item in the keys, the result."""

    point: str
    item: str
    result: PeerResult

    @property
    def tool(self) -> dict[str, str]:
        """The tool's name in each language (`label.peer_tool_<format>`)."""
        return tool_name(self.result.tool)


def tool_name(fmt: str) -> dict[str, str]:
    """A result format's tool by name, in each language."""
    return {lang: word(f"label.peer_tool_{fmt}", lang) for lang in LANGS}


def matches(rd: RoundData) -> list[PeerMatch]:
    """Every (point measured to the end, result that ran it), in point order, then the round's results' order."""
    return [PeerMatch(p.pid, peer_id(rd, r), r) for p in ok_points(rd)
            for r in peer_matches(rd, p)]


def unmatched(rd: RoundData) -> list[PeerResult]:
    """The results no point measured to the end ran (another load, or other lengths)."""
    ran = {id(m.result) for m in matches(rd)}
    return [r for r in rd.peers if id(r) not in ran]


def _within(ratio: float | None, share: float) -> bool:
    return ratio is not None and abs(ratio - 1) <= share


def peer_findings(led: Ledger, m: PeerMatch, labels: dict[str, str]) -> list[Finding]:
    """Why the result of M differs from our point, each reason by definition, most telling first."""
    p, k = m.point, f"p.{m.point}.{m.item}."
    fill = {"p": p, "peer": m.item, "tool": m.tool, "at": labels.get(p, p)}
    same = same_definition(m.result.tool)
    out: list[Finding | None] = []
    # Throughput: their whole run (ramp and drain included) against our steady window.
    whole, window = led.value_of(k + "peer_tok_s_over_whole_run"), led.value_of(k + "peer_tok_s_over_window")
    code = ("peer_tok_s_agree" if _within(whole, V.PEER_AGREE_SHARE) and _within(window, V.PEER_AGREE_SHARE) else
            "peer_tok_s_whole_run" if _within(whole, V.PEER_AGREE_SHARE) else "peer_tok_s_unexplained")
    out.append(make_finding(led, f"peer_tok_s_{p}_{m.item}", "peers", catalogue_texts(code, **fill), []))
    # ITL: what the tool calls ITL, and ours counted that way.
    how = DEFINITIONS[m.result.tool]["itl"]
    out.append(make_finding(led, f"peer_itl_{p}_{m.item}", "peers", catalogue_texts(f"peer_itl_{how}", **fill), []))
    # A client that read several events in one read stamps them all at the read: its per-event
    # gaps collapse to nothing, and its first event is late by the read's wait.
    theirs, ours_event = led.value_of(k + "peer_itl_ms_p50"), led.value_of(f"p.{p}.chunk_itl_ms_p50")
    if how == "per_chunk" and theirs is not None and ours_event and theirs < V.PEER_READ_TOGETHER_SHARE * ours_event:
        f = make_finding(led, f"peer_read_{p}_{m.item}", "peers", catalogue_texts("peer_read_together", **fill), [])
        server = make_finding(led, f"peer_read_{p}_{m.item}", "peers", catalogue_texts("peer_read_together_server", **fill), [])
        if f is not None and server is not None:
            f = Finding(f.id, f.kind, {lang: f.texts[lang] + word("finding.counters_sep", lang) + server.texts[lang]
                                       for lang in LANGS}, f.evidence + server.evidence)
        out.append(f)
    # Streams started together against ours spread over a ramp: where a stream's gaps carry
    # another's prefill more often than a p99 leaves out, our p99 is such a step; theirs,
    # whose prefills share steps with each other, is not.
    C = led.value_of(f"p.{p}.concurrency")
    if m.result.starts_together and C and C > 1:
        share, left = led.value_of(f"p.{p}.prefill_gap_share_staggered"), led.value_of("r.rule_p99_left_out")
        p99_theirs, p99_ours = led.value_of(k + "peer_itl_ms_p99"), led.value_of(f"p.{p}.{same['itl_ms_p99']}")
        # The prediction for streams kept in step: our per-event tail without the gaps another
        # stream's first token fell in (a per-event ITL only: a per-request mean has no such gaps).
        predicted = led.value_of(f"p.{p}.chunk_itl_ms_p99_no_prefill") if same["itl_ms_p99"] == "chunk_itl_ms_p99" else None
        spread = None not in (share, left, p99_ours, predicted) and share > left
        near = spread and p99_theirs is not None and abs(p99_theirs - predicted) < abs(p99_theirs - p99_ours)
        code = ("peer_starts_together_p99" if near else "peer_starts_together_predicted" if spread
                else "peer_starts_together")
        out.append(make_finding(led, f"peer_starts_{p}_{m.item}", "peers",
                                catalogue_texts(code, ours_p99=same["itl_ms_p99"], **fill), []))
    if m.result.tool == VLLM:
        out.append(make_finding(led, f"peer_warmup_{p}_{m.item}", "peers", catalogue_texts("peer_warmup", **fill), []))
    return [f for f in out if f is not None]


def round_peer_findings(led: Ledger, rd: RoundData, labels: dict[str, str]) -> list[Finding]:
    """Every match's reasons, in point order."""
    return [f for m in matches(rd) for f in peer_findings(led, m, labels)]
