"""The catalogue of reasons: every code the source uses has a text in every language, every
text is used, both languages fill the same fields, Chinese is punctuated as Chinese, and a
real CPU round's absent values read in Chinese with no English reason left in them."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from bundle.store.reader import read_bundle
from report.derive.gpu.datasheet import GPU_ABSENT_CODES, gpu_absent_reason
from report.derive.round.read import read_round
from report.judge.verdicts import build_ledger
from report.ledger import Absent, Ledger, Reason
from report.words import LANGS, fields_of, section, word
from tests.conftest import ROOT  # noqa: E402

PACKAGES = ("report", "bench", "bundle")
# The engine tests' oracles raise the catalogue's reasons as the report's quantities do.
ORACLES = "tests/oracles.py"
CODE = re.compile(r"reason\.[a-z0-9_]+")
CJK = re.compile(r"[\u4e00-\u9fff]")


def _trees():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))
    yield Path(ORACLES), ast.parse((ROOT / ORACLES).read_text(encoding="utf-8"))


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return ""


def _literal_codes(node: ast.AST) -> list[str] | None:
    """The codes a code argument can take: a string, or a conditional between strings; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        a, b = _literal_codes(node.body), _literal_codes(node.orelse)
        return None if a is None or b is None else a + b
    return None


def source_codes() -> dict[str, list[str]]:
    """Every reason code written in the source (any string constant `reason.<key>`), with where."""
    out: dict[str, list[str]] = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and CODE.fullmatch(node.value):
                out.setdefault(node.value, []).append(f"{path}:{node.lineno}")
    return out


def test_every_absent_and_reason_names_its_code_literally():
    # A code built at run time (an f-string, a variable) could not be checked against the catalogue.
    loose = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in ("Absent", "Reason.of", "Reason"):
                codes = _literal_codes(node.args[0]) if node.args else None
                if str(path) == "report/ledger.py" and ast.unparse(node.args[0]) == "code":
                    continue   # the machinery itself: Absent.__init__, reason_from_text
                if codes is None or not all(CODE.fullmatch(c) for c in codes):
                    loose.append(f"{path}:{node.lineno}")
    assert not loose, f"Absent/Reason with a code that is not a literal 'reason.<key>': {loose}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_code_in_the_source_has_a_text(lang):
    texts = section("reason", lang)
    lacking = {c: where for c, where in source_codes().items() if c.removeprefix("reason.") not in texts}
    assert not lacking, f"codes with no text in reason.{lang}.toml: {lacking}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_text_is_used(lang):
    used = {c.removeprefix("reason.") for c in source_codes()}
    unused = sorted(set(section("reason", lang)) - used)
    assert not unused, f"texts in reason.{lang}.toml that no code uses: {unused}"


def test_both_languages_fill_the_same_fields():
    en, zh = section("reason", "en"), section("reason", "zh")
    assert set(en) == set(zh)
    differ = {k: (sorted(fields_of(en[k])), sorted(fields_of(zh[k])))
              for k in en if fields_of(en[k]) != fields_of(zh[k])}
    assert not differ


def _outside_verbatim(text: str) -> str:
    """TEXT without its {fields}, `backticked` spans, and names with a colon inside (vllm:…, 2:4)."""
    out = "".join(lit + " " for lit, _, _, _ in string.Formatter().parse(text))
    out = re.sub(r"`[^`]*`", " ", out)
    return re.sub(r"[\w.*+-]+(?::[\w.*+-]+)+", " ", out)


def test_chinese_texts_use_chinese_punctuation():
    # Rule: no ASCII : , ; ( ) in a Chinese text, except inside a {field}, a `backticked` span,
    # or a name with no space around its colon (a metric like vllm:cache_config_info, a 2:4 ratio).
    bad = {k: t for k, t in section("reason", "zh").items()
           if re.search(r"[:,;()]", _outside_verbatim(t))}
    assert not bad, bad
    no_chinese = {k: t for k, t in section("reason", "zh").items()
                  if not CJK.search(_outside_verbatim(t)) and k != "window_span"}
    assert not no_chinese, no_chinese


def test_every_text_fills_with_plain_parameters():
    for lang in LANGS:
        for key, text in section("reason", lang).items():
            word(f"reason.{key}", lang, **{f: 1 for f in fields_of(text)})


def _english_fragments() -> set[str]:
    """The literal pieces of the English texts that are made of words (two or more)."""
    out = set()
    for text in section("reason", "en").values():
        for lit, _, _, _ in string.Formatter().parse(text):
            for piece in re.split(r"[:;,()]", lit):
                piece = piece.strip()
                if re.search(r"\b[a-z]{2,} [a-z]{2,}\b", piece):   # words, not one name
                    out.add(piece)
    return out


def _english_left(zh: str) -> list[str]:
    return [f for f in _english_fragments() if f in zh] + (["is absent"] if "is absent" in zh else [])


def test_a_chained_reason_names_the_root_once():
    led = Ledger()

    def window(t_end: float) -> float:
        """A window."""
        raise Absent("reason.window_empty")

    def tokens(window: float) -> float:
        """Tokens."""
        return window

    def rate(tokens: float) -> float:
        """Rate."""
        return tokens

    led.derive("w", window, t_end=1.0)
    led.derive("t", tokens, window=led["w"])
    v = led.derive("r", rate, tokens=led["t"])
    assert v.missing.text("en") == "tokens is absent: window is absent: the window is empty"
    assert v.missing.text("zh") == "窗口为空（输入 window → tokens 因此缺失）"
    assert v.missing.chain() == (["window", "tokens"], Reason.of("reason.window_empty"))


def test_a_reason_parameter_is_worded_in_the_same_language():
    r = Reason.of("reason.no_ok_scrape_latency",
                  window=Reason.of("reason.window_span", lo="1.000 s", hi=Reason.of("reason.window_end")))
    assert r.text("en") == "no successful scrape in [1.000 s, end], so no latency"
    assert r.text("zh") == "1.000 s 至 结束 内没有成功的抓取，无法求延迟"


def _collector_messages() -> list[str]:
    """Every reason bench/samplers/gpu.py's _open can record, with each {field} filled by a sample word."""
    tree = ast.parse((ROOT / "bench" / "samplers" / "gpu.py").read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_open")
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            msg = node.value.elts[1]
            if isinstance(msg, ast.Constant) and isinstance(msg.value, str):
                out.append(msg.value)
            elif isinstance(msg, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) else "Detail Here"
                                   for v in msg.values))
    return out


def test_every_reason_the_collector_records_reads_back_as_a_code():
    msgs = _collector_messages()
    assert len(msgs) >= 6
    for msg in msgs:
        r = gpu_absent_reason(msg)
        assert r.code in GPU_ABSENT_CODES, msg
        assert r.text("en") == msg
        assert not _english_left(r.text("zh")), (msg, r.text("zh"))
    assert gpu_absent_reason("something new").code == "reason.gpu_absent_recorded"


@pytest.fixture(scope="module")
def round_1():
    bundle = ROOT / "runs" / "round-1" / "bundle"
    if not bundle.is_dir():
        pytest.skip("runs/round-1 is not in this checkout")
    rd = read_round(read_bundle(bundle))
    return rd, build_ledger(rd)


def test_a_cpu_round_reads_in_chinese(round_1):
    rd, led = round_1
    absent = {k: v for k, v in led.values.items() if not v.present}
    assert len(absent) > 50   # a CPU round: no GPU, so many values are absent
    english = {}
    for k, v in absent.items():
        zh = v.missing.text("zh")
        assert CJK.search(zh), (k, zh)
        assert "：" not in zh and ": " not in zh, (k, zh)   # no chain of colons
        if _english_left(zh):
            english[k] = (zh, _english_left(zh))
    assert not english, english
    gpu = gpu_absent_reason(rd.bundle.manifest.get("gpu_absent_reason"))
    assert gpu is not None and gpu.code == "reason.nvml_no_library"
