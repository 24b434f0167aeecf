"""Safe arithmetic on model-written formulas: tokenize, check, and evaluate exactly — never ``eval``.

The reference verifier (``utils_rl.step_rewards``) runs Python ``eval`` on the model's text after a
regex check. We keep its token grammar (digit runs and ``+ - * / ( )``, nothing else, no spaces; only
ASCII digits, where the reference's ``\\d`` also takes e.g. Arabic-Indic ones) but
evaluate with our own shunting-yard parser over :class:`fractions.Fraction`, so

* no model text ever reaches ``eval``/``exec``/``compile``;
* arithmetic is exact: ``8/(3-8/3)`` is 24 (Python floats give 23.999999999999996, which the
  reference scores as wrong — a float artefact, not the game's rule);
* hostile input is bounded: formula length, bracket nesting, literal size and the size of every
  intermediate value are capped, and the parser is iterative (no recursion to exhaust). Bracket depth
  stops where CPython's parser does (200), so deep but legal nesting scores as in the reference.

Python semantics are kept where they decide an outcome: ``*``/``/`` bind tighter than ``+``/``-``,
all four are left-associative, a literal with a leading zero (``08``) is a syntax error, and division
by zero is an evaluation error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

TOKEN_RE = re.compile(r"[0-9]+|[+\-*/()]")  # ASCII digits only (\d would take "٣")
OPERATORS = "+-*/"
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}

# A four-card formula needs < 40 characters. The caps are set so that every formula the reference's
# ``eval`` could score (four numbers, so at most three operators; brackets up to Python's parser limit)
# gets the same outcome here, while longer text is refused before any parsing work.
MAX_FORMULA_CHARS = 1024
MAX_NESTING = 200  # CPython's tokenizer: "too many nested parentheses" beyond 200 levels
MAX_LITERAL_DIGITS = 12
MAX_VALUE_BITS = 1024  # numerator/denominator bit length of any intermediate value


class FormulaError(ValueError):
    """The formula cannot be evaluated; ``reason`` is a short human-readable cause."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class IllegalCharacters(FormulaError):
    """Text outside the token grammar (letters, spaces, ``**`` is fine lexically but not here)."""


class EvaluationError(FormulaError):
    """Well-lexed but not a valid or finite expression (unbalanced, dangling operator, x/0, too deep)."""


def tokenize(formula: str) -> list[str]:
    """Split into numbers, operators and brackets; any other character is an :class:`IllegalCharacters`."""
    if len(formula) > MAX_FORMULA_CHARS:
        raise IllegalCharacters(f"formula longer than {MAX_FORMULA_CHARS} characters")
    tokens = TOKEN_RE.findall(formula)
    if "".join(tokens) != formula:
        raise IllegalCharacters("illegal characters")
    return tokens


def _kind(token: str | int) -> str:
    if isinstance(token, int) or (token.isascii() and token.isdigit()):
        return "number"
    if token in OPERATORS:
        return "operator"
    if token == "(":
        return "open_paren"
    if token == ")":
        return "close_paren"
    return "unknown"


def sequence_errors(tokens: Sequence[str]) -> list[str]:
    """The reference's token-sequence check, message for message (each one costs ILLEGAL_FORMULA).

    It looks only at neighbouring tokens and unmatched ``)``; a dangling operator at the end or an
    unclosed ``(`` pass here and surface later as an evaluation error (as in the reference, where
    ``eval`` raises and the partial-solution check takes over).
    """
    errors: list[str] = []
    prev: str | None = None
    open_parens = 0
    for token in tokens:
        kind = _kind(token)
        if kind == "number":
            if prev not in (None, "operator", "open_paren"):
                errors.append("invalid sequence after number")
        elif kind == "operator":
            if prev not in ("number", "close_paren"):
                errors.append("invalid sequence after operator")
        elif kind == "open_paren":
            if prev in (None, "operator", "open_paren"):
                open_parens += 1
            else:
                errors.append("invalid sequence before '('")
        elif kind == "close_paren":
            if prev in ("number", "close_paren"):
                if open_parens:
                    open_parens -= 1
                else:
                    errors.append("unmatched closing parenthesis")
            else:
                errors.append("invalid sequence after ')'")
        else:
            errors.append("unknown token")
        prev = kind
    return errors


def to_rpn(tokens: Sequence[str | int]) -> list[str | int]:
    """Shunting-yard: infix tokens → postfix. Operands (digit strings or int placeholders) pass through.

    Raises :class:`EvaluationError` for anything Python's parser would reject in this grammar.
    """
    output: list[str | int] = []
    stack: list[str] = []
    expect_operand = True
    depth = 0
    for token in tokens:
        kind = _kind(token)
        if kind == "number":
            if not expect_operand:
                raise EvaluationError("two numbers in a row")
            output.append(token)
            expect_operand = False
        elif kind == "open_paren":
            if not expect_operand:
                raise EvaluationError("'(' after a number or ')'")
            depth += 1
            if depth > MAX_NESTING:
                raise EvaluationError(f"brackets nested deeper than {MAX_NESTING}")
            stack.append("(")
        elif kind == "close_paren":
            if expect_operand:
                raise EvaluationError("')' without a number before it")
            while stack and stack[-1] != "(":
                output.append(stack.pop())
            if not stack:
                raise EvaluationError("unmatched ')'")
            stack.pop()
            depth -= 1
        elif kind == "operator":
            if expect_operand:
                raise EvaluationError(f"operator {token!r} without a number before it")
            while stack and stack[-1] != "(" and PRECEDENCE[stack[-1]] >= PRECEDENCE[token]:
                output.append(stack.pop())
            stack.append(str(token))
            expect_operand = True
        else:
            raise EvaluationError(f"unknown token {token!r}")
    if expect_operand:
        raise EvaluationError("the formula is empty or ends with an operator")
    while stack:
        op = stack.pop()
        if op == "(":
            raise EvaluationError("unclosed '('")
        output.append(op)
    return output


def _check_size(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_VALUE_BITS or value.denominator.bit_length() > MAX_VALUE_BITS:
        raise EvaluationError("intermediate value too large")
    return value


def apply_operator(op: str, a: Fraction, b: Fraction) -> Fraction:
    if op == "+":
        return _check_size(a + b)
    if op == "-":
        return _check_size(a - b)
    if op == "*":
        return _check_size(a * b)
    if b == 0:
        raise EvaluationError("division by zero")
    return _check_size(a / b)


def _literal(token: str) -> Fraction:
    if len(token) > 1 and token[0] == "0":
        raise EvaluationError(f"number {token!r} has a leading zero")
    if len(token) > MAX_LITERAL_DIGITS:
        raise EvaluationError(f"number longer than {MAX_LITERAL_DIGITS} digits")
    return Fraction(int(token))


def evaluate_rpn(rpn: Sequence[str | int], operands: Sequence[Fraction] | None = None) -> Fraction:
    """Evaluate postfix tokens exactly. Integer placeholders index into ``operands``."""
    stack: list[Fraction] = []
    for token in rpn:
        if isinstance(token, int):
            if operands is None:
                raise EvaluationError("placeholder without operands")
            stack.append(Fraction(operands[token]))
        elif token in OPERATORS:
            b = stack.pop()
            a = stack.pop()
            stack.append(apply_operator(token, a, b))
        else:
            stack.append(_literal(token))
    if len(stack) != 1:  # cannot happen for output of to_rpn; guards hand-made input
        raise EvaluationError("malformed expression")
    return stack[0]


def evaluate(formula: str) -> Fraction:
    """The exact value of ``formula``; raises :class:`FormulaError` (with ``reason``) if it has none."""
    return evaluate_rpn(to_rpn(tokenize(formula)))


def numbers_in(formula: str) -> list[int]:
    """Every number literal in ``formula``, in order (the reference's ``re.findall(r'\\d+')``)."""
    return [int(n) for n in re.findall(r"[0-9]+", formula[: MAX_FORMULA_CHARS + 1])]
