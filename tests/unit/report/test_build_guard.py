"""`build` replaces only round directories it wrote itself, never a bundle or a run folder."""

from __future__ import annotations


def test_build_never_writes_over_what_it_did_not_write(tmp_path):
    from report.cli import is_site_round
    site = tmp_path / "site" / "round-1"
    site.mkdir(parents=True)
    (site / "round.json").write_text("{}")
    assert is_site_round(site)
    (site / "bundle").mkdir()
    (site / "bundle" / "manifest.json").write_text("{}")
    assert not is_site_round(site)                      # a bundle inside: never replaced
    other = tmp_path / "runs" / "round-2"
    other.mkdir(parents=True)
    (other / "plan.toml").write_text("")
    assert not is_site_round(other)
