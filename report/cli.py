"""The report's commands of `serving-ledger`: build the site, print a bundle's summary, ledger or findings."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

from bundle.files import BundleError, bundle_dir
from bundle.slo import SloError
from bundle.store.reader import find_bundles
from report.words import LANGS

FORMATS = ("html", "pdf")

SUMMARY_KEYS = [
    ("requests", "requests", 0), ("failed", "failed", 0),
    ("output_tokens_per_s", "output_tok_s", 1), ("total_tokens_per_s", "total_tok_s", 1),
    ("ttft_ms_p50", "ttft_ms_p50", 1), ("ttft_ms_p90", "ttft_ms_p90", 1), ("ttft_ms_p99", "ttft_ms_p99", 1),
    ("itl_ms_p50", "itl_ms_p50", 2), ("itl_ms_p90", "itl_ms_p90", 2), ("itl_ms_p99", "itl_ms_p99", 2),
    ("tpot_ms_mean", "tpot_ms_mean", 2), ("e2e_ms_p50", "e2e_ms_p50", 1), ("e2e_ms_p99", "e2e_ms_p99", 1),
]


def is_site_round(path: Path) -> bool:
    """Whether PATH is a round directory this tool wrote: its round.json, and no bundle inside."""
    return path.is_dir() and (path / "round.json").is_file() and \
        not any(path.rglob("manifest.json"))


def cmd_build(args: argparse.Namespace) -> int:
    from report.judge.result import refusal_text, round_id_for
    from report.publish.compose import compose_rounds
    from report.publish.site import ROUND_ID, build_site
    if args.bundle:
        pairs = [(Path(args.bundle), args.round or round_id_for(Path(args.bundle)))]
    else:
        pairs = [(b, round_id_for(b)) for b in find_bundles(args.runs)]
        if args.round:
            pairs = [(b, r) for b, r in pairs if r == args.round]
            if not pairs:
                print(f"error: no bundle for {args.round} under {args.runs}", file=sys.stderr)
                return 2
    if not pairs:
        print(f"error: no bundles under {args.runs} (record one with `make run ROUND=N`)",
              file=sys.stderr)
        return 2
    if not args.bundle:
        seen: dict[str, Path] = {}
        for b in find_bundles(args.runs):
            r = round_id_for(b)
            if r in seen:
                print(f"error: {seen[r]} and {b} are both round {r} (a round's id is its "
                      "directory's name); rename one", file=sys.stderr)
                return 2
            seen[r] = b
    formats = tuple(args.formats.split(","))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        print(f"error: --formats: unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}",
              file=sys.stderr)
        return 2
    bad = next((r for _, r in pairs if not ROUND_ID.match(r)), None)
    if bad is not None:
        print(f"error: round id {bad!r} is not a safe directory name (letters, digits, '.', '_', "
              "'-'); give one with --round", file=sys.stderr)
        return 2
    # The pages of a round replace OUT/<round>/: never a directory this tool did not write,
    # and never one that holds (or is) a bundle being read.
    out = Path(args.out).resolve()
    for b, r in pairs:
        target = out / r
        if target.exists() and not is_site_round(target):
            print(f"error: --out {args.out}: {target} holds files this tool did not write "
                  "(its pages would replace them); choose another --out", file=sys.stderr)
            return 2
        if Path(b).resolve().is_relative_to(target) or target.is_relative_to(Path(b).resolve()):
            print(f"error: --out {args.out}: the pages of {r} would be written over its bundle "
                  f"{b}; choose another --out", file=sys.stderr)
            return 2
    compare_with = tuple(getattr(args, "compare_with", None) or ())
    if compare_with and len(pairs) != 1:
        print("error: --compare-with: other tools' results are set beside one round; name it with "
              "--round or --bundle", file=sys.stderr)
        return 2
    if compare_with:
        from bundle.peers import read_peer_files
        read_peer_files(list(compare_with))    # PeerFileError (one line, exit 2) before any work
    peer_files = {pairs[0][1]: compare_with} if compare_with else {}
    if args.jobs is not None and args.jobs < 1:
        print(f"error: --jobs must be at least 1, not {args.jobs}", file=sys.stderr)
        return 2
    from report.publish.site import default_workers
    workers = args.jobs or default_workers()
    t0 = time.perf_counter()
    keys: dict[str, str] = {}
    refused: list[str] = []     # rounds whose bundle could not be read; the others are built
    slo, cost = slo_argument(args), cost_argument(args)
    if args.bundle:
        reports = compose_rounds(pairs, slo=slo, cost=cost, compare_with=peer_files)
    else:
        # A round whose bundle, previous round, code, templates and formats are unchanged
        # keeps its pages; each stale round is composed with the round before it.
        from report.judge.result import previous_round_id
        from report.publish.buildkey import code_digest, round_key, up_to_date
        every = {r: b for b, r in ((b, round_id_for(b)) for b in find_bundles(args.runs))}
        code = code_digest()
        stale = []
        for b, r in pairs:
            try:
                keys[r] = round_key(b, every.get(previous_round_id(r) or ""), code, formats, args.slo,
                                    cost and repr(cost[0]), peer_files.get(r, ()))
            except Exception as e:  # noqa: BLE001 - one round that cannot be read stops no other
                refused.append(f"{r}: {refusal_text(e)}")
                continue
            if args.force or not up_to_date(Path(args.out), r, keys[r]):
                stale.append(r)
        for r in sorted(set(keys) - set(stale)):
            print(f"{r}: up to date", file=sys.stderr)
        wanted = (set(stale) | {previous_round_id(r) for r in stale}) - {
            line.split(":", 1)[0] for line in refused}
        reports = [rep for rep in compose_rounds([(b, r) for r, b in every.items() if r in wanted],
                                                 refused, slo, cost, peer_files)
                   if rep.round_id in stale]
        for line in refused:
            from bundle.textsafety import terminal_line
            print(terminal_line(f"error: {line}"), file=sys.stderr)
        for r in (line.split(":", 1)[0] for line in refused):
            keys.pop(r, None)
    t1 = time.perf_counter()
    built = build_site(reports, Path(args.out), formats=formats, keys=keys, workers=workers)
    t2 = time.perf_counter()
    for p in built:
        print(p)
    rebuilt = [r.round_id for r in reports]
    reused = sorted(set(keys) - set(rebuilt))
    docs = len(rebuilt) * 2
    print(f"rebuilt {len(rebuilt)} round(s){': ' + ', '.join(rebuilt) if rebuilt else ''}"
          f" ({docs} documents, {min(workers, docs) if docs else 0} process(es)); "
          f"reused {len(reused)}{': ' + ', '.join(reused) if reused else ''}; "
          f"ledger {t1 - t0:.2f} s, render {t2 - t1:.2f} s", file=sys.stderr)
    if refused:
        print(f"error: {len(refused)} round(s) not built (above): "
              f"{', '.join(line.split(':', 1)[0] for line in refused)}", file=sys.stderr)
        return 2
    return 0


def point_summaries(bundle_dir: Path, warnings: list[str] | None = None) -> list[dict]:
    """Per point, the client statistics from the ledger (None where absent); the bundle's
    read warnings (a truncated last line) are appended to WARNINGS."""
    from bundle.store.reader import read_bundle
    from report.derive.round.read import NO_SLO, read_round
    from report.judge.verdicts import build_ledger
    bundle = read_bundle(bundle_dir)
    if warnings is not None:
        warnings.extend(bundle.warnings)
    rd = read_round(bundle, slo=NO_SLO)     # the summary prints no SLO value: none is read
    led = build_ledger(rd)
    out = []
    for p in rd.points:
        row = {"point": p.pid, "status": p.window.status, "concurrency": p.settings.get("concurrency"),
               "input_len": p.settings.get("input_len"), "output_len": p.settings.get("output_len"),
               "request_rate": p.settings.get("request_rate")}
        for name, key, _ in SUMMARY_KEYS:
            v = led.get(f"p.{p.pid}.{key}")
            row[name] = v.value if v is not None and v.present else None
        out.append(row)
    return out


def cmd_summary(args: argparse.Namespace) -> int:
    d = bundle_dir(args.run_dir)
    warnings: list[str] = []
    rows = point_summaries(d, warnings)
    from bundle.textsafety import json_text, terminal_line
    print_warnings(d, warnings)
    if args.json:
        print(json_text(json.dumps({"bundle": str(d), "points": rows}, indent=2)))
        return 0
    cols = [("point", "point", None), ("status", "status", None), ("C", "concurrency", 0), ("in", "input_len", 0),
            ("out", "output_len", 0)] + [(n, n, dg) for n, _, dg in SUMMARY_KEYS]
    table = [[c[0] for c in cols]]
    for r in rows:
        table.append([terminal_line("—" if r[k] is None else (f"{r[k]:,.{dg}f}" if isinstance(r[k], float)
                                                              else str(r[k]))
                                    if dg is not None else str(r[k])) for _, k, dg in cols])
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    return 0


def print_warnings(bundle_dir: Path, warnings: list[str]) -> None:
    """A bundle's read warnings (a truncated last line, requests of no point) on stderr."""
    from bundle.textsafety import terminal_line
    for w in warnings:
        print(terminal_line(f"warning: {bundle_dir}/{w}"), file=sys.stderr)


def cmd_ledger(args: argparse.Namespace) -> int:
    from bundle.textsafety import json_text, terminal_line
    from report.judge.result import judge_bundle
    from report.publish.dumps import ledger_json
    from report.publish.numbers import format_value
    res = judge_bundle(args.run_dir, slo_argument(args), gpu_argument(args), cost_argument(args))
    rd, led = res.rd, res.led
    print_warnings(rd.bundle.path, rd.bundle.warnings)
    if args.json:
        print(json_text(json.dumps(ledger_json(led), indent=1, ensure_ascii=False)))
        return 0
    for key, v in led.values.items():
        print(terminal_line(key) + "\t" + terminal_line(format_value(v, args.lang)))
    return 0


def cmd_findings(args: argparse.Namespace) -> int:
    from bundle.textsafety import json_text, terminal_line
    from report.judge.result import judge_bundle
    from report.publish.dumps import findings_json
    res = judge_bundle(args.run_dir, slo_argument(args), gpu_argument(args), cost_argument(args))
    print_warnings(res.rd.bundle.path, res.rd.bundle.warnings)
    out = findings_json(res)
    if args.json:
        print(json_text(json.dumps(out, indent=1, ensure_ascii=False)))
        return 0
    from report.words import word
    for p in out["points"]:
        said = (word("label.cli_point_valid", args.lang, point=p["point"], bottleneck=p["bottleneck"])
                if p["valid"] else
                word("label.cli_point_invalid", args.lang, point=p["point"], bottleneck=p["bottleneck"],
                     reasons=", ".join(p["invalid_reasons"])))
        print(terminal_line(said))
    for f in out["findings"]:
        print(terminal_line(f"- {f['text_' + args.lang]}"))
    return 0


EXPORT_FORMATS = ("llmd-benchmark-report",)


def cmd_export(args: argparse.Namespace) -> int:
    """A round's points in another tool's result format: one JSON per point under --out, or a JSON list on stdout."""
    import os

    from bundle.textsafety import json_text
    from report.judge.result import judge_bundle
    from report.publish.llmd import ExportError, benchmark_reports
    res = judge_bundle(args.run_dir, slo_argument(args))
    rd, led = res.rd, res.led
    print_warnings(rd.bundle.path, rd.bundle.warnings)
    try:
        reports = benchmark_reports(rd, led)
    except ExportError as e:
        print(f"error: {args.run_dir}: {e}", file=sys.stderr)
        return 2
    if not reports:
        print(f"error: {args.run_dir}: no point was measured to the end; nothing to export", file=sys.stderr)
        return 2
    if not args.out:
        print(json_text(json.dumps([r for _, r in reports], indent=1, ensure_ascii=False)))
        return 0
    out = Path(args.out)
    if not out.is_dir():
        print(f"error: --out {out}: not a directory", file=sys.stderr)
        return 2
    targets = [(out / f"{pid}.json", r) for pid, r in reports]
    there = next((t for t, _ in targets if os.path.lexists(t)), None)
    if there is not None:
        print(f"error: --out {out}: {there.name} exists; an export is written only as new files", file=sys.stderr)
        return 2
    for target, r in targets:
        with open(target, "x", encoding="utf-8") as f:     # "x": never replaces a file
            f.write(json.dumps(r, indent=1, ensure_ascii=False) + "\n")
        print(target)
    return 0


def add_export_arguments(c: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger export`."""
    c.add_argument("run_dir")
    c.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                   help="llmd-benchmark-report: llm-d-benchmark's benchmark report v0.2.1, one per point")
    c.add_argument("--out", help="a directory to write <point>.json into (new files only); "
                   "without it, a JSON list on stdout")
    c.add_argument("--slo", help=SLO_HELP)


SLO_HELP = ("judge every round against this SLO instead of its own (slo.toml beside the bundle, "
            "or the plan's [slo]): 'ttft:MS,tpot:MS,e2e:MS,itl:MS,p:PERCENTILE', any subset")


GPU_HELP = ("the GPU the server ran on, as the spec table names it (e.g. 'NVIDIA H200'), for a bundle "
            "whose client sampled none: its datasheet peaks feed the step model")


class GpuArgumentError(ValueError):
    """A --gpu the spec table does not know."""


def gpu_argument(args: argparse.Namespace) -> str:
    """The --gpu given, checked against the spec table; a GPU it does not know raises GpuArgumentError."""
    from report.architecture.gpus import known_gpu_names, lookup_gpu
    name = getattr(args, "gpu", None) or ""
    if name and lookup_gpu(name) is None:
        raise GpuArgumentError(f"--gpu {name!r}: not in the GPU spec table (known: {', '.join(known_gpu_names())})")
    return name


COST_FLAGS = {"gpu_hour_price": "--gpu-hour-price", "target_req_s": "--target-rps", "target_tok_s": "--target-tok-s"}


def add_cost_arguments(c: argparse.ArgumentParser) -> None:
    """The flags that cost a round: its price per GPU-hour and a target load (bundle/cost.py)."""
    c.add_argument("--gpu-hour-price", type=float, metavar="USD",
                   help="price of one GPU for one hour: prices every point's tokens and the SLO capacity's "
                        "(overrides the round's slo.toml or plan [cost])")
    c.add_argument("--target-rps", type=float, metavar="REQ_S",
                   help="requests per second a deployment must serve: the replicas and GPUs it needs")
    c.add_argument("--target-tok-s", type=float, metavar="TOK_S",
                   help="output tokens per second a deployment must serve (where --target-rps is not given)")


def cost_argument(args: argparse.Namespace):
    """The cost flags given as (Cost, "--gpu-hour-price, ..."), or None; a bad value raises CostError naming its flag."""
    from bundle.cost import CostError, cost_from_dict
    given = {k: getattr(args, k) for k in COST_FLAGS if getattr(args, k, None) is not None}
    if not given:
        return None
    try:
        cost = cost_from_dict(given, "command line")
    except CostError as e:
        flag = next(f for k, f in COST_FLAGS.items() if f"].{k}:" in str(e))
        raise CostError(f"{flag}: {str(e).split(': ', 1)[1]}") from None
    return cost, ", ".join(COST_FLAGS[k] for k in given)


def slo_argument(args: argparse.Namespace):
    """The --slo given as (Slo, "--slo"), or None; a malformed one raises SloError."""
    from bundle.slo import slo_from_text
    return (slo_from_text(args.slo), "--slo") if getattr(args, "slo", None) else None


def cmd_next(args: argparse.Namespace) -> int:
    """Each next step of a round with the plan that runs it; --write writes one step's plan."""
    import os
    import tempfile

    from bundle.textsafety import json_text, terminal_line
    from report.judge.result import judge_bundle
    from report.publish.plans import applied, next_plan_title, plan_toml, step_comment
    from report.words import word
    res = judge_bundle(args.run_dir, slo_argument(args))
    bundle = res.rd.bundle.path
    print_warnings(bundle, res.rd.bundle.warnings)
    steps, lang = res.facts["next_steps"], args.lang
    recorded = read_recorded_plan(bundle)
    if args.json:
        print(json_text(json.dumps(steps, indent=1, ensure_ascii=False)))
    elif not args.write:
        from report.publish.numbers import plain_text
        for i, st in enumerate(steps, 1):
            print(terminal_line(f"[{i}] {st['id']}: {plain_text(st[lang], res.led, lang)}"))
            if st.get("plan"):
                changes = "; ".join(f"[{sec}] {k} = {v!r}" for sec, keys in st["plan"].items()
                                    for k, v in keys.items())
                print(terminal_line(f"    plan: {changes}"))
                expect = plain_text(st["expect"][lang], res.led, lang)
                print(terminal_line(f"    {word('label.plan_comment_expect', lang, text=expect)}"))
            else:
                print(terminal_line(f"    {word('label.next_no_plan', lang)}"))
    if not args.write:
        return 0
    runnable = [st for st in steps if st.get("plan")]
    chosen = next((st for st in runnable if st["id"] == args.step), None) if args.step else \
        (runnable[0] if runnable else None)
    if chosen is None:
        ids = ", ".join(st["id"] for st in runnable) or "none"
        print(f"error: --step {args.step or ''}: no step of {res.round_id} with that plan (steps with a plan: {ids})",
              file=sys.stderr)
        return 2
    target = Path(args.write)
    if target.exists():
        print(f"error: --write {target}: the file exists; a plan is written only as a new file", file=sys.stderr)
        return 2
    if not target.parent.is_dir():
        print(f"error: --write {target}: no directory {target.parent}", file=sys.stderr)
        return 2
    new_id = target.parent.name if target.name == "plan.toml" else target.stem
    plan = applied(recorded, chosen["plan"], new_id, next_plan_title(res.round_id, chosen["id"]))
    text = plan_toml(plan, step_comment(chosen, res.round_id, res.led, "en"))
    check = getattr(args, "check_plan", None)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".plan-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if check is not None:
            problem = check(tmp, str(target))
            if problem:
                print(terminal_line(f"error: {problem}"), file=sys.stderr)
                return 2
        os.link(tmp, target)        # fails if TARGET appeared meanwhile: never replaces a file
    finally:
        os.unlink(tmp)
    print(terminal_line(word("label.next_written", lang, path=str(target), step=chosen["id"])))
    return 0


def read_recorded_plan(bundle: Path) -> dict:
    """The plan a bundle's manifest says its round ran."""
    from bundle.store.reader import read_bundle
    return read_bundle(bundle).manifest.get("plan") or {}


def add_next_arguments(c: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger next`."""
    c.add_argument("run_dir")
    c.add_argument("--write", metavar="PLAN", help="write the plan of one step to PLAN, a new file "
                   "(runs/round-M/plan.toml: `make run ROUND=M` runs it)")
    c.add_argument("--step", help="the step whose plan --write writes (default: the first with a plan)")
    c.add_argument("--lang", choices=("en", "zh"), default="en")
    c.add_argument("--json", action="store_true")
    c.add_argument("--slo", help=SLO_HELP)


def add_build_arguments(b: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger build`."""
    b.add_argument("--runs", default="runs", help="where bundles live (default runs/)")
    b.add_argument("--bundle", help="build this one bundle instead")
    b.add_argument("--round", help="only this round (e.g. round-2), or the id for --bundle")
    b.add_argument("--out", default="site")
    b.add_argument("--formats", default="html,pdf")
    b.add_argument("--force", action="store_true",
                   help="rebuild every round, even those whose inputs are unchanged")
    b.add_argument("--jobs", type=int, default=None,
                   help="processes rendering documents at once (default: the usable cores)")
    b.add_argument("--slo", help=SLO_HELP)
    add_cost_arguments(b)
    b.add_argument("--compare-with", action="append", metavar="FILE",
                   help="another tool's result file (vllm bench serve --save-result, GuideLLM's or "
                        "AIPerf's JSON) to set beside the round's points, besides its external/*.json; "
                        "repeatable, with one round (--round or --bundle)")


def add_bundle_arguments(c: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger summary | ledger | findings`: one bundle, text or JSON."""
    c.add_argument("run_dir")
    c.add_argument("--json", action="store_true")
    c.add_argument("--slo", help=SLO_HELP)
    c.add_argument("--gpu", help=GPU_HELP)
    add_cost_arguments(c)


def add_text_arguments(c: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger ledger | findings`: a bundle's, and the language of the plain text."""
    add_bundle_arguments(c)
    c.add_argument("--lang", choices=LANGS, default="en", help="language of the plain text (default en)")


def guarded(cmd: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """CMD, a report command, with bad input said in one line on stderr and exit 2."""
    def run(args: argparse.Namespace) -> int:
        try:
            return cmd(args)
        except (BundleError, SloError, GpuArgumentError) as e:
            from bundle.textsafety import terminal_line
            print(terminal_line(f"error: {e}"), file=sys.stderr)
            return 2
        except OSError as e:  # an unwritable --out, a file where a directory should be
            where = f"{e.filename}: " if e.filename else ""
            print(f"error: {where}{e.strerror or e}", file=sys.stderr)
            return 2
    run.__doc__ = cmd.__doc__
    return run
