"""Bad input to the real command lines: one clear line naming the file, exit status 2, no traceback.

A small bundle is recorded once against the fake server (tests/fakeserver.py); each test
damages a copy of it the way a crash, a bad disk or another tool version would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_bench
from tests.fakeserver import FAKE_ROUND_PLAN, FakeServer

PLAN = FAKE_ROUND_PLAN
DEAD_ENDPOINT = "http://127.0.0.1:9"  # never contacted: the input is refused first


def cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit status 2 and one line on stderr that names what is wrong; no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "p.toml").write_text(PLAN)
    out = root / "bundle-ok"
    with FakeServer(token_delay_s=0.002) as url:
        run_bench("run", "--plan", str(root / "p.toml"), "--endpoint", url, "--out", str(out),
                  timeout=120)
    return out


@pytest.fixture
def bundle(recorded, tmp_path) -> Path:
    """A fresh copy of the recorded bundle to damage."""
    return Path(shutil.copytree(recorded, tmp_path / "b"))


def edit_manifest(bundle: Path, **changes) -> None:
    p = bundle / "manifest.json"
    m = json.loads(p.read_text())
    m.update(changes)
    p.write_text(json.dumps(m, indent=2))


def all_commands_refuse(bundle: Path, tmp_path: Path, *needles: str) -> None:
    """report build, report summary and bench run --resume each refuse BUNDLE the same way."""
    assert_refused(cli("report", "build", "--bundle", str(bundle), "--round", "x",
                       "--out", str(tmp_path / "site"), "--formats", "html"), *needles)
    assert not (tmp_path / "site" / "x").exists()
    assert_refused(cli("report", "summary", str(bundle)), *needles)
    assert_refused(cli("bench", "run", "--endpoint", DEAD_ENDPOINT, "--concurrency", "1",
                       "--out", str(bundle), "--resume"), *needles)


# ------------------------------------------------------------------ bundles

def test_truncated_last_line_is_reported_and_skipped(bundle, tmp_path):
    p = bundle / "requests.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    n = len(lines)
    p.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a crash mid-write

    summary = cli("report", "summary", str(bundle))
    assert summary.returncode == 0 and "Traceback" not in summary.stderr, summary.stderr
    assert f"requests.jsonl line {n}: truncated last line skipped" in summary.stderr
    rows = summary.stdout.splitlines()
    assert rows[0].split()[0] == "point" and len(rows) == 3

    build = cli("report", "build", "--bundle", str(bundle), "--round", "x",
                "--out", str(tmp_path / "site"), "--formats", "html")
    assert build.returncode == 0 and "Traceback" not in build.stderr, build.stderr
    for lang in ("en", "zh"):
        html = (tmp_path / "site" / "x" / f"index.{lang}.html").read_text()
        method = html[html.index('id="sec-method"'):]
        assert f"requests.jsonl line {n}: truncated last line skipped" in method


def test_invalid_manifest_json(bundle, tmp_path):
    p = bundle / "manifest.json"
    p.write_text(p.read_text().replace('"status"', '"status', 1))
    all_commands_refuse(bundle, tmp_path, "manifest.json line ", "not valid JSON")


def test_invalid_json_in_the_middle_of_requests(bundle, tmp_path):
    p = bundle / "requests.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    p.write_text("".join(lines))
    all_commands_refuse(bundle, tmp_path, "requests.jsonl line 3", "not valid JSON")


@pytest.mark.parametrize("version, needle", [(0, "older than any this tool can upgrade"),
                                             (2, "newer than this tool reads")])
def test_unknown_schema_version(bundle, tmp_path, version, needle):
    edit_manifest(bundle, schema_version=version)
    all_commands_refuse(bundle, tmp_path, "manifest.json", f"schema_version {version}", needle)


def test_manifest_with_an_unknown_field(bundle, tmp_path):
    edit_manifest(bundle, mystery={"a": 1})
    all_commands_refuse(bundle, tmp_path, "manifest.json", "unknown fields ['mystery']")


def test_manifest_section_of_the_wrong_type(bundle, tmp_path):
    edit_manifest(bundle, engine="vllm", clock=[1, 2])
    all_commands_refuse(bundle, tmp_path, "manifest.json")


def test_sample_record_without_its_time(bundle, tmp_path):
    p = bundle / "points.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    rec = json.loads(lines[3])
    del rec["t"]
    lines[3] = json.dumps(rec) + "\n"
    p.write_text("".join(lines))
    all_commands_refuse(bundle, tmp_path, "points.jsonl line 4", "'t'")


def test_not_a_bundle(tmp_path):
    assert_refused(cli("report", "summary", str(tmp_path)), "manifest.json", "not a bundle")


# ------------------------------------------------------------------ report build arguments

@pytest.mark.parametrize("args, needle", [
    (("--round", "../escape"), "not a safe directory name"),
    (("--round", "x", "--formats", "html,docx"), "unknown format 'docx'"),
])
def test_report_build_bad_arguments(recorded, tmp_path, args, needle):
    assert_refused(cli("report", "build", "--bundle", str(recorded), "--out", str(tmp_path / "s"),
                       *args), needle)
    assert not (tmp_path / "escape").exists()


def test_report_build_into_a_file(recorded, tmp_path):
    (tmp_path / "f").write_text("")
    assert_refused(cli("report", "build", "--bundle", str(recorded), "--round", "x",
                       "--out", str(tmp_path / "f"), "--formats", "html"), str(tmp_path / "f"))


# ------------------------------------------------------------------ plans

@pytest.mark.parametrize("body, needles", [
    ("[sweep]\nconcurency = [1, 2]\n", ("[sweep]", "unknown key(s) ['concurency']")),
    ("[sweeps]\nconcurrency = [1]\n", ("unknown key(s) ['sweeps']",)),
    ("[sweep]\nconcurrency = = 1\n", ("line 2",)),
    ("[sweep]\ninput_len = ['a']\n", ("[sweep].input_len", "'a' is not an integer")),
    ("[sweep]\nrequest_rate = ['x']\narrival = 'poisson'\n", ("[sweep].request_rate",)),
    ("[sweep]\nserver_flags = [[1]]\n", ("[sweep].server_flags",)),
    ("[engine]\nenv = 5\n", ("[engine].env", "expected a table")),
    ("seed = 'x'\n", ("seed must be an integer",)),
    ("[engine]\nmodel_config = '/nonexistent/config.json'\n",
     ("[engine].model_config", "/nonexistent/config.json")),
])
def test_bad_plan(tmp_path, body, needles):
    plan = tmp_path / "plan.toml"
    plan.write_text(body)
    out = tmp_path / "b"
    assert_refused(cli("bench", "run", "--plan", str(plan), "--endpoint", DEAD_ENDPOINT,
                       "--out", str(out)), str(plan), *needles)
    assert not out.exists()  # nothing recorded for a plan that cannot run


def test_missing_plan_file(tmp_path):
    assert_refused(cli("bench", "run", "--plan", str(tmp_path / "nope.toml"), "--out",
                       str(tmp_path / "b")), str(tmp_path / "nope.toml"), "no such plan file")


def test_plan_strings_are_data(tmp_path):
    """A plan value that looks like code stays a string: TOML is parsed, never evaluated."""
    from bench.plan import load_plan
    marker = tmp_path / "pwned"
    code = f"__import__('os').system('touch {marker}')"
    plan = tmp_path / "plan.toml"
    plan.write_text(f'id = "{{{{ 7 * 7 }}}}"\ntitle = "{code}"\n[workload]\nkind = "random"\n')
    p = load_plan(plan)
    assert p.title == code and p.id == "{{ 7 * 7 }}"
    assert p.to_dict()["title"] == code
    assert not marker.exists()


@pytest.mark.parametrize("args, needle", [
    (("--endpoint", "not-a-url"), "--endpoint: 'not-a-url' is not an http"),
    (("--launch", "serve --port 1"), "--launch needs --endpoint"),
    (("--endpoint", DEAD_ENDPOINT, "--concurrency", "1,x"), "comma-separated integers"),
])
def test_bad_run_arguments(tmp_path, args, needle):
    proc = cli("bench", "run", *args, "--out", str(tmp_path / "b"))
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert not (tmp_path / "b").exists()


def test_run_into_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    assert_refused(cli("bench", "run", "--endpoint", DEAD_ENDPOINT, "--out", str(tmp_path / "f")),
                   str(tmp_path / "f"))


def test_launch_command_that_does_not_exist(tmp_path):
    out = tmp_path / "b"
    assert_refused(cli("bench", "run", "--launch", "no-such-server-binary --port 1",
                       "--endpoint", DEAD_ENDPOINT, "--out", str(out)), "no-such-server-binary")
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and "no-such-server-binary" in m["status_reason"]


# ------------------------------------------------------------------ report explain

def test_explain_missing_model_config(tmp_path):
    missing = tmp_path / "no-model" / "config.json"
    assert_refused(cli("report", "explain", "--model", str(missing), "--gpu", "NVIDIA H200",
                       "--concurrency", "4", "--input-len", "128", "--output-len", "32"),
                   str(missing))


def test_explain_invalid_model_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 64,\n "num_layers": }')
    assert_refused(cli("report", "explain", "--model", str(cfg), "--gpu", "NVIDIA H200",
                       "--concurrency", "4", "--input-len", "128", "--output-len", "32"),
                   str(cfg), "line 2")
