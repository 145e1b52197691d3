"""A round's slo.toml goes through the one reader (bundle/textfile.py): a regular file, bounded,
strictly UTF-8, nested boundedly, any error one line naming file and field and exit 2; a bad
one stops no command that uses no SLO (`summary`), and `build --runs` names the round it
cannot build and builds the others, whatever stopped it."""

from __future__ import annotations

import os
import shutil

import pytest

from bundle.slo import MAX_SLO_BYTES, SloError, slo_of_file
from bundle.textfile import MAX_DEPTH
from tests.conftest import FIXTURES, run_bench


@pytest.fixture
def round_dir(tmp_path):
    d = tmp_path / "round-1"
    shutil.copytree(FIXTURES / "cpu-demo", d / "bundle")   # a recorded bundle
    return d


@pytest.mark.parametrize("content, words", [
    (b"[slo]\nttft_ms = 500 # \xff\n", "not UTF-8 text (byte 0xff at offset"),
    (b"[slo]\nttft_ms = " + b"[" * 30_000 + b"]" * 30_000 + b"\n", "nested deeper than"),
    (b"[slo]\nttft_ms = " + b"[" * (MAX_DEPTH + 2) + b"1" + b"]" * (MAX_DEPTH + 2) + b"\n",
     "slo.ttft_ms" + "[0]" * (MAX_DEPTH - 2) + " is nested deeper than"),
    (b'[slo]\nttft_ms = "fast"\n', "[slo].ttft_ms: expected a finite number"),
    (b"[slo]\nttft_ms = nan\n", "[slo].ttft_ms: expected a finite number"),
    (b"[slo\n", "not TOML"),
    (b"# " + b"x" * MAX_SLO_BYTES + b"\n[slo]\nttft_ms = 1\n", "over 64 KiB"),
])
def test_a_bad_slo_toml_is_one_line_for_the_ledger_and_nothing_for_the_summary(round_dir, content, words):
    (round_dir / "slo.toml").write_bytes(content)
    with pytest.raises(SloError) as e:
        slo_of_file(round_dir / "slo.toml")
    assert words in str(e.value) and str(round_dir / "slo.toml") in str(e.value)
    r = run_bench("ledger", str(round_dir), check=False, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert words in r.stderr and "slo.toml" in r.stderr
    r = run_bench("summary", str(round_dir), check=False, timeout=120)
    assert r.returncode == 0 and "L128-c8" in r.stdout and r.stderr == ""


def test_a_slo_toml_that_is_a_symlink_to_a_huge_file_or_a_pipe_is_refused_unread(round_dir, tmp_path):
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)            # 4 GiB, sparse: read whole it would fill memory
    os.symlink(huge, round_dir / "slo.toml")
    with pytest.raises(SloError, match="over 64 KiB; not a file this tool reads"):
        slo_of_file(round_dir / "slo.toml")
    os.remove(round_dir / "slo.toml")
    os.mkfifo(round_dir / "slo.toml")   # read blocking, it would wait for a writer forever
    with pytest.raises(SloError, match="not a regular file"):
        slo_of_file(round_dir / "slo.toml")


def test_build_runs_names_each_round_it_cannot_build_and_builds_the_others(tmp_path, monkeypatch):
    from report.judge import verdicts
    from report.publish import compose
    runs = tmp_path / "runs"
    for r in ("round-1", "round-2", "round-3"):
        shutil.copytree(FIXTURES / "cpu-demo", runs / r / "bundle")
    (runs / "round-2" / "slo.toml").write_bytes(b"[slo]\n\xfe\n")
    real = verdicts.build_ledger

    def fails_on_round_3(rd):
        if rd.round_id == "round-3":
            raise ZeroDivisionError("a fault of the ledger")
        return real(rd)
    from report.judge import result
    monkeypatch.setattr(result, "build_ledger", fails_on_round_3)
    refused: list[str] = []
    pairs = [(runs / r / "bundle", r) for r in ("round-1", "round-2", "round-3")]
    reports = compose.compose_rounds(pairs, refused)
    assert [rep.round_id for rep in reports] == ["round-1"]
    assert len(refused) == 2 and all("\n" not in line for line in refused)
    assert refused[0].startswith("round-2: ") and "slo.toml: not UTF-8 text" in refused[0]
    assert refused[1] == "round-3: ZeroDivisionError: a fault of the ledger"
    with pytest.raises(ZeroDivisionError):             # without REFUSED the fault is raised
        compose.compose_rounds(pairs[2:])
