"""No model text reaches Python's eval/exec/compile: checked in the source and at run time."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import spatialrl.envs.gp as gp_package
from spatialrl.envs.gp.env import GeneralPointsEnv

FORBIDDEN = {"eval", "exec", "compile", "__import__", "execfile"}


def _forbidden_use(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and node.id in FORBIDDEN:
        return node.id
    if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
        owner = node.value.id if isinstance(node.value, ast.Name) else None
        if not (node.attr == "compile" and owner == "re"):  # re.compile builds our own regexes
            return f"{owner}.{node.attr}"
    if isinstance(node, ast.Constant) and node.value in FORBIDDEN:  # getattr(builtins, "eval")
        return repr(node.value)
    return None


def test_gp_source_never_uses_eval_exec_or_compile():
    files = sorted(Path(gp_package.__file__).parent.glob("*.py"))
    assert len(files) >= 10
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            use = _forbidden_use(node)
            assert use is None, f"{path.name}:{getattr(node, 'lineno', '?')} uses {use}"
    # The check itself can fail: it flags the reference's own verifier line.
    assert _forbidden_use(ast.parse("num = eval(txt)").body[0].value.func) == "eval"


HOSTILE = [
    '{"cards": ["A", "5", "5", "5"], "formula": "__import__(\'os\').system(\'touch PWNED\')"}',
    '{"formula": "5*(5-1/5)); import os; os.system(\'touch PWNED\'); (1"}',
    '"formula": "9**9**9**9"',
    '"formula": "' + "(" * 300 + "5*(5-1/5)" + ")" * 300 + '"',
    '"formula": "' + "1" * 5000 + '"',
    '"formula": "5*(5-1/5)\\u0000"',
    '{"cards": ' + "[" * 10000 + "]" * 10000 + "}",
    "\x00\xff" * 1000,
]


@pytest.fixture
def no_dynamic_code(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("dynamic code execution during verification")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, refuse)


def test_hostile_answers_are_scored_without_dynamic_code(no_dynamic_code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for mode in ("vl", "l"):
        env = GeneralPointsEnv(mode=mode, resolution=64)
        env.reset(seed=0, options={"cards": "HA S5 D5 C5", "verify_iter": len(HOSTILE) + 1})
        for text in HOSTILE:
            _, reward, terminated, _, info = env.step(text)
            assert not terminated and reward < 0, (text[:60], info["record"])
        # The same machinery still scores a right answer.
        _, reward, terminated, _, _ = env.step(info["expert_response"])
        assert terminated and reward == 5
    assert not (tmp_path / "PWNED").exists()
