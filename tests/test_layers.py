"""Imports only go down the layers (docs/architecture.md, issue 22).

Every module of ``src/spatialrl`` is parsed with ``ast``; every import counts, the ones inside functions
too (a function-level import hides a cycle from Python, not from this test). Layers, bottom up::

    conversation, io, errors, lru, overrides  <  render, models  <  worlds  <  envs  <  agents  <  rollout
    <  eval, train  <  web, cli (and every area's own ``cli.py``, which only mounts commands)

A module may import its own layer and the layers below it, never one above.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "spatialrl"

# First dotted component under spatialrl -> layer rank (higher = nearer the user).
LAYERS = {
    "conversation": 0, "io": 0, "errors": 0, "lru": 0, "overrides": 0,
    "render": 1, "models": 1,
    "worlds": 2,
    "envs": 3,
    "agents": 4,
    "rollout": 5,
    "eval": 6, "train": 6,
    "web": 7, "cli": 7, "demo": 7,
}
CLI_RANK = 7  # an area's `cli.py` mounts commands: it may reach every layer

# Edges that still point up, (importing module, imported package at depth 3) -> why and who removes it.
# Remove an entry when its edge is gone (a stale entry warns).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    # the built-in tokenizer is trained on the task prompt corpora, found by module name; the corpus should
    # be passed in by the caller (models/cli.py, a CLI module may import envs).
    ("spatialrl.models.tokenizer", "spatialrl.envs.tvr"): "models: pass the prompt corpus in",
    ("spatialrl.models.tokenizer", "spatialrl.envs.virl"): "models: pass the prompt corpus in",
    ("spatialrl.models.tokenizer", "spatialrl.envs.gp"): "models: pass the prompt corpus in",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ``spatialrl`` module ``path`` imports, at any depth of the file (absolute and relative)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).split(".") if SRC in path.parents else ["spatialrl", "outside"]
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    # importlib.import_module("spatialrl....") with a literal name counts too (lazy mounts, lazy exports)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("spatialrl."):
            if node.value.replace(".", "").replace("_", "").isalnum():
                found.add(node.value)
    return {m for m in found if m == "spatialrl" or m.startswith("spatialrl.")}


def rank(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if parts[-1] == "cli":
        return CLI_RANK
    return LAYERS.get(parts[1])


def edges() -> list[tuple[str, str]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        source = module_name(path)
        for target in sorted(imports_of(path)):
            out.append((source, target))
    return out


def upward(source: str, target: str) -> bool:
    r_src, r_dst = rank(source), rank(target)
    if r_src is None or r_dst is None:
        return False
    # a name imported from a package's __init__ may be a sub-module: judge by the package's layer
    return r_dst > r_src


def test_every_package_has_a_layer():
    packages = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in SRC.iterdir()
                if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    packages.discard("__init__")
    assert packages <= set(LAYERS), f"give {sorted(packages - set(LAYERS))} a layer in LAYERS"


def test_imports_only_go_down():
    found = {(s, t) for s, t in edges() if upward(s, t)}
    by_module: dict[tuple[str, str], str] = {}
    for s, t in found:
        key = (s, ".".join(t.split(".")[:3]))
        by_module[key] = t
    unexpected = sorted(k for k in by_module if k not in KNOWN_EXCEPTIONS)
    assert not unexpected, "upward imports:\n" + "\n".join(f"  {s} -> {t}" for s, t in unexpected)
    stale = sorted(k for k in KNOWN_EXCEPTIONS if k not in by_module)
    if stale:
        warnings.warn(f"known upward imports that no longer exist (remove them from KNOWN_EXCEPTIONS): {stale}",
                      stacklevel=1)


@pytest.mark.parametrize(("below", "above"), [
    ("spatialrl.worlds", "spatialrl.envs"),
    ("spatialrl.rollout", "spatialrl.train"),
    ("spatialrl.agents", "spatialrl.train"),
    ("spatialrl.envs", "spatialrl.train"),
    ("spatialrl.envs", "spatialrl.agents"),
])
def test_done_when_of_issue_22(below, above):
    """The issue's explicit list, checked by name (not only by rank)."""
    bad = sorted((s, t) for s, t in edges()
                 if (s == below or s.startswith(below + ".")) and (t == above or t.startswith(above + "."))
                 and (s, ".".join(t.split(".")[:3])) not in KNOWN_EXCEPTIONS)
    assert not bad, f"{below} imports {above}: {bad}"


def test_the_parser_sees_hidden_imports(tmp_path):
    """Function-level, relative and by-name imports all count."""
    hidden = tmp_path / "m.py"
    hidden.write_text("import importlib\n\ndef f():\n    from spatialrl.envs.virl import rail\n"
                      "    import spatialrl.train.ppo\n    from .sibling import x\n"
                      "    return importlib.import_module('spatialrl.agents.hf')\n")
    assert {"spatialrl.envs.virl", "spatialrl.envs.virl.rail", "spatialrl.train.ppo",
            "spatialrl.agents.hf"} <= imports_of(hidden)
    assert upward("spatialrl.worlds.city.writer", "spatialrl.envs.virl.validate")
    assert not upward("spatialrl.envs.virl.city", "spatialrl.worlds.city.writer")
    assert not upward("spatialrl.envs.virl.cli", "spatialrl.eval.evaluate")  # a cli.py mounts commands
