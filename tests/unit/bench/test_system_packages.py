"""tools/system_packages.sh, the system half of `make demo` / `make test`, on a machine that lacks
the packages: as root it installs them; otherwise it prints the one command and stops.

`dpkg-query`, `id` and `apt-get` are replaced by stand-ins on PATH (HAND-BUILT): the test machine has
the packages, and a test must not install anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "tools" / "system_packages.sh"
WANTED = ("fonts-noto-cjk", "libharfbuzz-subset0", "poppler-utils", "chromium", "gcc", "libc6-dev")


def run(tmp_path: Path, uid: int, installed: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    stubs = {
        # dpkg-query -W -f='${Status}' NAME; a removed package keeps "deinstall ok config-files"
        "dpkg-query": "#!/bin/sh\nfor p; do :; done\ncase \" %s \" in *\" $p \"*) "
                      "printf 'install ok installed'; exit 0;; esac\n"
                      "printf 'deinstall ok config-files'; exit 0\n" % " ".join(installed),
        "id": f"#!/bin/sh\necho {uid}\n",
        "apt-get": f"#!/bin/sh\necho \"$@\" >> {log}\n",
    }
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), sys.executable], env=env, capture_output=True,
                          text=True, timeout=60)


def test_without_root_it_prints_the_one_command_and_stops(tmp_path):
    r = run(tmp_path, uid=1000)
    assert r.returncode == 1
    assert "run: sudo apt-get install -y --no-install-recommends" in r.stderr
    for pkg in WANTED:
        assert pkg in r.stderr
    assert not (tmp_path / "apt.log").exists()  # nothing was installed


def test_as_root_it_installs_only_what_is_missing(tmp_path):
    r = run(tmp_path, uid=0, installed=("gcc", "libc6-dev", "poppler-utils"))
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls[0].startswith("update")
    install = calls[1].split()
    assert install[:2] == ["install", "-y"]
    assert {"fonts-noto-cjk", "libharfbuzz-subset0", "chromium"} <= set(install)
    assert not {"gcc", "libc6-dev", "poppler-utils"} & set(install)


def test_with_everything_installed_it_does_nothing(tmp_path):
    r = run(tmp_path, uid=1000, installed=(*WANTED, "python3-dev"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and not (tmp_path / "apt.log").exists()
