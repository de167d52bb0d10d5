"""Bad command lines, table-driven: each is refused in one line on stderr with exit code 2.

The cases are tests/hostile_cases.py's. Most run in this process through the console entry
point (spottrain.cli.main.main, the same code path as the installed command); a sample of every
command also runs as a real subprocess, and `run` / `profile` cases only as subprocesses (an
accepted one would start workers). bench/hostile_input.py runs the whole table as subprocesses
with a time limit and counts the outcomes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostile_cases import Case, build_fixtures, cases, cleanup, run_inprocess, run_subprocess

ALL = [c for c in cases() if c.fast]
IN_PROCESS = [c for c in ALL if c.argv[0] not in ("run", "profile", "demo")]
SUBPROCESS = [c for c in ALL if c.argv[0] in ("run", "profile")][::8] + IN_PROCESS[::40]


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    home = root / "home"
    old = {k: os.environ.get(k) for k in ("HOME", "XDG_DATA_HOME", "SPOTTRAIN_STORE")}
    os.environ.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"))
    os.environ.pop("SPOTTRAIN_STORE", None)
    yield build_fixtures(root / "files")
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    created = list(home.rglob("*")) if home.exists() else []
    cleanup(root)
    assert not created, f"bad input created files: {created[:5]}"


def _check(outcome, case: Case) -> None:
    assert outcome.kind in ("clean", "ok"), (f"{case.id}: {outcome.kind}, exit {outcome.rc}\n"
                                             f"{outcome.stderr[-800:]}")


def test_the_table_has_at_least_100_bad_invocations():
    assert sum(c.expect == "refuse" for c in ALL) >= 100


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.id for c in IN_PROCESS])
def test_refused_in_one_line(case, fixtures):
    _check(run_inprocess(case, fixtures), case)


@pytest.mark.parametrize("case", SUBPROCESS, ids=[c.id for c in SUBPROCESS])
def test_refused_in_one_line_as_a_subprocess(case, fixtures, tmp_path):
    _check(run_subprocess(case, fixtures, timeout_s=60, cwd=tmp_path), case)
    assert not list(Path(tmp_path).iterdir()), "a refused command left files in the working directory"
