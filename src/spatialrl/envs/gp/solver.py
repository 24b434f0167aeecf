"""Exact solvers for the 24 game.

Two questions, two functions:

* :func:`solutions` — every formula *in the reference's written form* that reaches the target. The
  reference (RosettaCode's solver inside ``GeneralPointEnv_oneline.solve``) writes each permutation of
  the numbers with each choice of three operators in seven bracket layouts::

      a.b.c.d   (a.b).c.d   (a.b.c).d   a.(b.c).d   a.(b.c.d)   a.b.(c.d)   (a.b).(c.d)

  The list matters beyond solvability: the verifier calls a wrong formula a PARTIAL_SOLUTION or
  NO_SOLUTION by comparing its *text* with these strings' prefixes, so we must produce the same
  strings. Each candidate is screened in floats and confirmed in exact fractions (no ``eval``).
* :func:`is_solvable` — the classic exact search (combine any two numbers with any operator, recurse),
  over all expression trees, for any count of numbers. It checks the layouts above are complete (they
  are for four numbers 1..13 and target 24: all 1,820 multisets agree; see tests/gp).

Both are cached on the sorted numbers: the formula set of a hand is permutation-invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from itertools import permutations, product

from spatialrl.envs.gp.equation import apply_operator, evaluate_rpn, to_rpn

N_CARDS = 4
# The reference's bracket insertion points (RosettaCode): pairs of (index of '(', index of ')') into
# the 7-token list a,op,b,op,c,op,d, inserted left to right; the last one places two pairs.
BRACKETS: tuple[tuple[int, ...], ...] = (
    (),
    (0, 4),
    (0, 6),
    (2, 6),
    (2, 8),
    (4, 8),
    (0, 4, 6, 10),
)
_TOLERANCE = 1e-9


def formula_tokens(ops: tuple[str, ...], brackets: tuple[int, ...]) -> list[str | int]:
    """Token list with integer placeholders 0..3 for the numbers, e.g. ['(', 0, '+', 1, ')', '*', ...]."""
    tokens: list[str | int] = [0, ops[0], 1, ops[1], 2, ops[2], 3]
    for position, bracket in zip(brackets, "()" * (len(brackets) // 2), strict=True):
        tokens.insert(position, bracket)
    return tokens


@lru_cache(maxsize=1)
def _templates() -> list[tuple[list[str | int], list[str | int]]]:
    """(token template, postfix program) for every operator triple × bracket layout, reference order."""
    out = []
    for ops in product("+-*/", repeat=N_CARDS - 1):
        for brackets in BRACKETS:
            tokens = formula_tokens(ops, brackets)
            out.append((tokens, to_rpn(tokens)))
    return out


def _float_value(rpn: list[str | int], values: Sequence[float]) -> float | None:
    stack: list[float] = []
    for token in rpn:
        if isinstance(token, int):
            stack.append(values[token])
            continue
        b = stack.pop()
        a = stack.pop()
        if token == "+":
            stack.append(a + b)
        elif token == "-":
            stack.append(a - b)
        elif token == "*":
            stack.append(a * b)
        elif b == 0:
            return None
        else:
            stack.append(a / b)
    return stack[0]


@lru_cache(maxsize=8192)
def _solutions_sorted(numbers: tuple[int, ...], target: int) -> tuple[str, ...]:
    found: dict[str, None] = {}
    exact_target = Fraction(target)
    for perm in sorted(set(permutations(numbers))):
        floats = [float(n) for n in perm]
        exact = [Fraction(n) for n in perm]
        for tokens, rpn in _templates():
            value = _float_value(rpn, floats)
            if value is None or abs(value - target) > _TOLERANCE * max(1.0, abs(target)):
                continue
            if evaluate_rpn(rpn, exact) == exact_target:  # confirm exactly (floats only screen)
                text = "".join(str(perm[t]) if isinstance(t, int) else t for t in tokens)
                found[text] = None
    return tuple(found)


def solutions(numbers: Sequence[int], target: int = 24) -> tuple[str, ...]:
    """All reference-form formulas over exactly ``numbers`` (four of them) that equal ``target``.

    Ordered by sorted permutation, then operator triple (``+ - * /`` order), then bracket layout —
    the reference's order before its ``random.shuffle`` of permutations.
    """
    if len(numbers) != N_CARDS:
        raise ValueError(f"the reference formula layouts are for {N_CARDS} numbers, got {len(numbers)}")
    return _solutions_sorted(tuple(sorted(int(n) for n in numbers)), int(target))


@lru_cache(maxsize=65536)
def _solvable(values: tuple[Fraction, ...], target: Fraction) -> bool:
    if len(values) == 1:
        return values[0] == target
    n = len(values)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            rest = [values[k] for k in range(n) if k not in (i, j)]
            for op in "+-*/":
                if op in "+*" and i > j:
                    continue  # commutative: (a, b) covers (b, a)
                if op == "/" and values[j] == 0:
                    continue
                combined = apply_operator(op, values[i], values[j])
                if _solvable(tuple(sorted(rest + [combined])), target):
                    return True
    return False


def is_solvable(numbers: Sequence[int], target: int = 24) -> bool:
    """Whether any expression using each number exactly once, with + - * / and brackets, hits ``target``."""
    if not numbers:
        return False
    return _solvable(tuple(sorted(Fraction(int(n)) for n in numbers)), Fraction(target))
