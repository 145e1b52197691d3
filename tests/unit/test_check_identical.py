"""`tools/check_identical.py compare --moved`: a file that differs from its earlier build only by
the names of functions that moved module (tools/moved_functions.toml) is accepted and counted;
any other difference is still one. The folders are HAND-BUILT here, not built."""

from __future__ import annotations

import importlib.util
import tomllib

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("check_identical", ROOT / "tools" / "check_identical.py")
check_identical = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_identical)

MOVED = '[files]\n"old.py" = "new/old.py"\n["report.derive.old"]\nratio = "report.derive.arith"\n'


def test_the_committed_map_names_modules_that_exist():
    moved = tomllib.loads((ROOT / "tools" / "moved_functions.toml").read_text(encoding="utf-8"))
    for new in moved.pop("files", {}).values():
        assert list((ROOT / "report").rglob(new)), new
    for funcs in moved.values():
        for name, module in funcs.items():
            mod = importlib.import_module(module)
            assert callable(getattr(mod, name, None)), f"{module}.{name}"


def test_moved_names_alone_are_accepted_and_counted(tmp_path, capsys):
    (tmp_path / "moved.toml").write_text(MOVED, encoding="utf-8")
    moved = check_identical.moved_names(tmp_path / "moved.toml")
    assert moved == {"report.derive.old.ratio": "report.derive.arith.ratio", "old.ratio": "arith.ratio",
                     "old.py": "new/old.py"}
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir(), after.mkdir()
    (before / "a.html").write_text('<td>report.derive.old.ratio</td><td>report.derive.old.ratio_x (old.py)</td>')
    (after / "a.html").write_text('<td>report.derive.arith.ratio</td><td>report.derive.old.ratio_x (new/old.py)</td>')
    (before / "b.json").write_text('{"f": "old.ratio", "v": 1}')
    (after / "b.json").write_text('{"f": "arith.ratio", "v": 1}')
    assert check_identical.compare(before, after, moved) == 0
    assert "3 moved-name differences accepted, in 2 files" in capsys.readouterr().err
    # Without the map, and with another difference beside a moved name, a file differs.
    assert check_identical.compare(before, after) == 1
    (after / "b.json").write_text('{"f": "arith.ratio", "v": 2}')
    assert check_identical.compare(before, after, moved) == 1
    assert "b.json.v: 1 -> 2" in capsys.readouterr().out


def test_a_bad_map_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text('[x]\nratio = 3\n', encoding="utf-8")
    assert check_identical.main(["compare", str(tmp_path), str(tmp_path), "--moved", str(tmp_path / "bad.toml")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
