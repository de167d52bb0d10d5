"""The HTML report builder: self-contained output, escaping, and the overwrite rule."""

from __future__ import annotations

import re

import pytest

from report_synthetic import SYNTHETIC_SECTIONS, build_synthetic_report
from spottrain.errors import InputError
from spottrain.report import GENERATOR_MARKER, Report, is_spottrain_report, table_html


def test_report_is_self_contained(tmp_path):
    path = build_synthetic_report().save(tmp_path / "r.html")
    text = path.read_text()
    assert GENERATOR_MARKER in text
    for title in SYNTHETIC_SECTIONS:
        assert f"<h2>{title}</h2>" in text
    # Nothing to fetch: no scripts, no external links or images.
    assert "<script" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text)
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', text)
    assert len(imgs) == 5 and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert all(re.search(r'<img [^>]*alt="[^"]{20,}"', text) for _ in imgs)


def test_text_is_escaped_and_unavailable_sections_say_why(tmp_path):
    text = build_synthetic_report().to_html()
    assert "&lt;b&gt;not bold&lt;/b&gt;" in text and "<b>not bold</b>" not in text
    assert 'data-status="not available"' in text
    assert "deliberately skipped in the fixture" in text


def test_table_formats_cells():
    html = table_html([{"name": "a", "usd": 1234.0, "frac": 0.12345, "none": None, "flag": True}])
    assert "<th>usd</th>" in html and "1,234" in html
    assert "0.123" in html and "&mdash;" in html and "yes" in html


def test_overwrites_its_own_report_but_not_other_files(tmp_path):
    own = tmp_path / "own.html"
    Report("first").save(own)
    Report("second").save(own)  # a previous spottrain report may be replaced
    assert "<title>second</title>" in own.read_text()

    foreign = tmp_path / "mine.html"
    foreign.write_text("<html><body>my notes</body></html>")
    assert not is_spottrain_report(foreign)
    with pytest.raises(InputError, match="--force"):
        Report("x").save(foreign)
    assert foreign.read_text() == "<html><body>my notes</body></html>"
    Report("forced").save(foreign, force=True)
    assert is_spottrain_report(foreign)


def test_rejects_bad_names(tmp_path):
    with pytest.raises(InputError, match=".html"):
        Report("x").save(tmp_path / "r.txt")
    (tmp_path / "d.html").mkdir()
    with pytest.raises(InputError, match="directory"):
        Report("x").save(tmp_path / "d.html")


def test_plots_are_png_with_sensible_size():
    import struct

    for block in [b for s in build_synthetic_report().sections for b in s.blocks if "<img" in b]:
        import base64

        data = base64.b64decode(re.search(r"base64,([^\"]+)", block).group(1))
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert width >= 500 and height >= 250
