"""`spottrain demo` command line: the report-overwrite rule and bad options, without the long run."""

from __future__ import annotations

import subprocess
import sys

from spottrain.report import Report


def _demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "demo", *args],
                          capture_output=True, text=True, timeout=120)


def test_refuses_to_overwrite_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "report.html"
    mine.write_text("<html>my own notes</html>")
    out = _demo("--report", str(mine))
    assert out.returncode == 2
    assert "--force" in out.stderr and "report.html" in out.stderr
    assert "Traceback" not in out.stderr
    assert mine.read_text() == "<html>my own notes</html>"


def test_rejects_a_report_name_that_is_not_html(tmp_path):
    out = _demo("--report", str(tmp_path / "r.png"))
    assert out.returncode == 2 and ".html" in out.stderr and "Traceback" not in out.stderr


def test_rejects_a_bad_deadline(tmp_path):
    out = _demo("--deadline", "soon", "--report", str(tmp_path / "r.html"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert not (tmp_path / "r.html").exists()


def test_previous_report_is_recognised(tmp_path):
    # The overwrite rule lets `make demo` re-run into the same file.
    from spottrain.report import is_spottrain_report

    prev = Report("previous").save(tmp_path / "out.html")
    assert is_spottrain_report(prev)
