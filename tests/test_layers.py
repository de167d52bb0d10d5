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


def _import_graph() -> dict[str, set[str]]:
    """``module -> spottrain modules it imports``, read from the source (function-level imports too).

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``; a
    package's ``__init__`` counts as the package. Parent packages that Python runs on the way
    are not edges (they are not what the code asks for)."""
    import ast
    from pathlib import Path

    import spottrain

    root = Path(spottrain.__file__).parent
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = ("spottrain", *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in modules:  # "import spottrain.x.y" of a name inside a module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or ``None`` (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_import_graph_walker_sees_function_level_imports_and_cycles():
    graph = _import_graph()
    # a function-level import (spottrain.cli imports its commands lazily) is an edge
    assert "spottrain.catalog" in graph["spottrain.cli.transience_cmd"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_spottrain_modules_import_without_cycles():
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_exported_plan_function_is_not_shadowed_by_a_module():
    # A submodule named like an exported function replaces it on the package once imported.
    code = (
        "import spottrain, spottrain.sim, spottrain.planner, spottrain.plan_file\n"
        "print(callable(spottrain.plan) and type(spottrain.plan).__name__ == 'function')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stdout + out.stderr
