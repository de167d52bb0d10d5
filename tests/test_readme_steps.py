"""The README's step-by-step block runs top to bottom in a fresh copy of the repository.

Every command of the block is run as written, in order, in a directory holding only the files
git tracks (what a fresh clone has), so a step that needs a file nobody ships (``runs.csv``) or a
file an earlier step did not write fails here. The slow steps run in their small form: the extra
arguments are listed in :data:`SMALL_FORM` and only ever *added* (fewer iterations, runs or
steps), never replacing what the README says.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMALL_FORM = {
    # step (command + first option) -> arguments added to keep the test short
    ("profile", "--model"): ["--iterations", "1", "--warmup", "0", "--no-store"],
    ("plan", "--profile"): ["--refine-runs", "3"],
    ("plan", "--model"): ["--refine-runs", "3"],
    ("simulate", "--plan"): ["--runs", "20"],
    ("run", "--plan"): [],
}
RUN_LOCAL_SMALL = ["--steps", "12", "--no-record"]
SKYPILOT_SMALL = ["--dry-run"]


def readme_steps() -> list[list[str]]:
    """The commands of the README's step-by-step block, as argument lists after ``spottrain``."""
    text = (ROOT / "README.md").read_text()
    block = text.split("step by step", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    steps = []
    for line in block.strip().splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if not line:
            continue
        argv = shlex.split(line)
        assert argv[0] == ".venv/bin/spottrain", line
        steps.append(argv[1:])
    return steps


def small(argv: list[str]) -> list[str]:
    """``argv`` with the small form's extra arguments (before any ``--`` command)."""
    head, sep, tail = (argv, [], [])
    if "--" in argv:
        i = argv.index("--")
        head, sep, tail = argv[:i], ["--"], argv[i + 1:]
    extra = list(SMALL_FORM.get((head[0], head[1]), []))
    if head[0] == "profile":
        # the README's model at a tiny size: the same code path, seconds instead of a minute
        head = [("mlp-tiny" if prev == "--model" else a) for prev, a in zip([""] + head, head)]
    if head[0] == "simulate":
        head = [a for a in head]
        if "--runs" in head:
            k = head.index("--runs")
            head = head[:k] + head[k + 2:]
    if head[0] == "run":
        extra += ([a for a in SKYPILOT_SMALL if a not in head] if "skypilot" in head else RUN_LOCAL_SMALL)
    return head + extra + sep + tail


def fresh_copy(dest: Path) -> Path:
    """The tracked files of this working tree (what a clone has), without build outputs."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if not name:
            continue
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_readme_block_parses_and_names_shipped_files():
    steps = readme_steps()
    assert [s[0] for s in steps][:3] == ["catalog", "profile", "predict"]
    for s in steps:
        for a in s:
            if a.endswith(".csv"):
                assert (ROOT / a).is_file(), f"README names {a}, which is not shipped"
    prof = next(s for s in steps if s[0] == "profile")
    assert prof[prof.index("--batch-size") + 1] == "8", "the README's profile must finish in about a minute on a CPU"


@pytest.mark.slow
def test_readme_steps_run_top_to_bottom(tmp_path, monkeypatch, capsys):
    """Each step runs in this process (``spottrain.cli.main.main``, as the console script does),
    from the copy's directory, so that the imports and the fitted models are paid for once; the
    files the steps name and write are the copy's."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the tracked files")
    from spottrain.cli.main import main

    work = fresh_copy(tmp_path / "clone")
    (work / "train.py").write_text("print('user training script')\n")  # the user's own script of the last step
    monkeypatch.chdir(work)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("SPOTTRAIN_STORE", str(tmp_path / "store.db"))
    for argv in readme_steps():
        args = small(argv)
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        out = capsys.readouterr()
        assert code == 0, f"spottrain {' '.join(args)} exited {code}:\n{out.err[-2000:]}"
        assert "Traceback" not in out.err
    for out in ("p.json", "plan.json", "lifetimes.png"):
        assert (work / out).is_file(), out
