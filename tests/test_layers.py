"""The layering rules: planning code never imports torch; imports go one way."""

import subprocess
import sys

PLANNING_MODULES = [
    "spottrain",
    "spottrain.errors",
    "spottrain.types",
    "spottrain.units",
    "spottrain.catalog",
    "spottrain.perf",
    "spottrain.transience",
    "spottrain.planner",
    "spottrain.sim",
    "spottrain.cli.main",
]


def test_planning_modules_do_not_import_torch():
    code = (
        "import importlib, sys\n"
        f"for m in {PLANNING_MODULES!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print(len(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_public_api_resolves_every_name():
    code = (
        "import sys, spottrain\n"
        "torch_names = {'profile','Profile','PROFILE_SCHEMA_VERSION','load_profile','zoo_names','Trainer','TrainConfig','Checkpointer',"
        "'run_local','LocalJob','RunSummary','Store'}\n"
        "for n in spottrain.__all__:\n"
        "    if n not in torch_names: getattr(spottrain, n)\n"
        "assert 'torch' not in sys.modules, 'planning API pulled in torch'\n"
        "for n in torch_names: getattr(spottrain, n)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
