"""The solvers against an independent brute force, and the reference's formula strings."""

from __future__ import annotations

import ast
import itertools
from fractions import Fraction

import numpy as np
import pytest

from spatialrl.envs.gp.equation import evaluate, numbers_in
from spatialrl.envs.gp.solver import BRACKETS, is_solvable, solutions

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


# The five binary-tree shapes of four leaves.
SHAPES = (
    lambda a, b, c, d, f1, f2, f3: f3(f2(f1(a, b), c), d),  # ((a.b).c).d
    lambda a, b, c, d, f1, f2, f3: f3(f1(a, f2(b, c)), d),  # (a.(b.c)).d
    lambda a, b, c, d, f1, f2, f3: f2(f1(a, b), f3(c, d)),  # (a.b).(c.d)
    lambda a, b, c, d, f1, f2, f3: f1(a, f3(f2(b, c), d)),  # a.((b.c).d)
    lambda a, b, c, d, f1, f2, f3: f1(a, f2(b, f3(c, d))),  # a.(b.(c.d))
)


def brute_force_solvable(numbers: list[int], target: int) -> bool:
    """Every permutation × operator triple × tree shape, in Fractions."""
    for leaves in itertools.permutations([Fraction(n) for n in numbers]):
        for ops in itertools.product("+-*/", repeat=3):
            fs = [OPS[o] for o in ops]
            for shape in SHAPES:
                try:
                    if shape(*leaves, *fs) == target:
                        return True
                except ZeroDivisionError:
                    continue
    return False


def ast_value(text: str) -> Fraction:
    """Evaluate our own solver strings with Python's parser (an independent check of precedence)."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        assert isinstance(node, ast.BinOp)
        sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
        return OPS[sym](walk(node.left), walk(node.right))

    return walk(ast.parse(text, mode="eval"))


def reference_strings(numbers: list[int], target: int) -> set[str]:
    """The RosettaCode string construction of the reference, values via the AST evaluator."""
    out = set()
    for perm in set(itertools.permutations(numbers)):
        for ops in itertools.product("+-*/", repeat=3):
            ex = [str(perm[0]), ops[0], str(perm[1]), ops[1], str(perm[2]), ops[2], str(perm[3])]
            for b in BRACKETS:
                exp = ex[:]
                for pos, br in zip(b, "()" * (len(b) // 2), strict=True):
                    exp.insert(pos, br)
                text = "".join(exp)
                try:
                    if ast_value(text) == target:
                        out.add(text)
                except ZeroDivisionError:
                    pass
    return out


def test_random_deals_agree_with_brute_force():
    rng = np.random.default_rng(7)
    n_solvable = 0
    for _ in range(80):
        numbers = [int(x) for x in rng.integers(1, 14, size=4)]
        expected = brute_force_solvable(numbers, 24)
        assert is_solvable(numbers, 24) == expected, numbers
        assert bool(solutions(numbers, 24)) == expected, numbers
        n_solvable += expected
    assert 25 < n_solvable < 80  # both classes were exercised


def test_solution_strings_are_the_reference_ones_and_all_correct():
    rng = np.random.default_rng(3)
    for _ in range(6):
        numbers = [int(x) for x in rng.integers(1, 11, size=4)]
        found = solutions(numbers, 24)
        assert set(found) == reference_strings(numbers, 24)
        assert len(found) == len(set(found))
        for text in found:
            assert evaluate(text) == 24
            assert sorted(numbers_in(text)) == sorted(numbers)


@pytest.mark.parametrize(
    ("numbers", "expected"),
    [([3, 3, 8, 8], ("8/(3-8/3)",)), ([1, 5, 5, 5], ("(5-1/5)*5", "5*(5-1/5)")), ([1, 1, 1, 1], ())],
)
def test_known_hands(numbers, expected):
    assert solutions(numbers, 24) == expected
    assert is_solvable(numbers, 24) == bool(expected)


def test_other_targets_and_counts():
    assert solutions([1, 2, 3, 4], 10)  # 1+2+3+4
    assert not brute_force_solvable([1, 1, 1, 1], 10) and not solutions([1, 1, 1, 1], 10)
    assert is_solvable([6, 4], 24) and not is_solvable([5, 4], 24)  # any count of numbers
    assert is_solvable([2, 3, 4, 1, 1], 24)
    with pytest.raises(ValueError):
        solutions([1, 2, 3], 24)


def test_solutions_do_not_depend_on_card_order():
    assert solutions([8, 3, 8, 3]) == solutions([3, 3, 8, 8])
