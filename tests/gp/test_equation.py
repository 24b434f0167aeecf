"""The safe evaluator: Python's precedence and errors, exact arithmetic, bounded work on hostile text."""

from __future__ import annotations

from fractions import Fraction

import pytest

from spatialrl.envs.gp.equation import (
    MAX_FORMULA_CHARS,
    MAX_NESTING,
    EvaluationError,
    IllegalCharacters,
    apply_operator,
    evaluate,
    numbers_in,
    sequence_errors,
    tokenize,
)


@pytest.mark.parametrize(
    ("formula", "value"),
    [
        ("2+3*4", 14),
        ("8-4-2", 2),
        ("8/4/2", 1),
        ("2*(3+4)", 14),
        ("((7))", 7),
        ("8/(3-8/3)", 24),  # floats give 23.999999999999996
        ("1/3*3", 1),
        ("10-2*3+4/8", Fraction(9, 2)),
    ],
)
def test_values_match_python_semantics_exactly(formula, value):
    assert evaluate(formula) == value


@pytest.mark.parametrize(
    ("formula", "reason"),
    [
        ("5/(5-5)", "division by zero"),
        ("(1+2", "unclosed '('"),
        ("1+2)", "unmatched ')'"),
        ("1+", "ends with an operator"),
        ("", "empty"),
        ("08+1", "leading zero"),
        ("()", "')' without a number"),
        ("1(2)", "'(' after a number"),
        ("1234567890123+1", "longer than 12 digits"),
    ],
)
def test_evaluation_errors(formula, reason):
    with pytest.raises(EvaluationError) as e:
        evaluate(formula)
    assert reason in e.value.reason


@pytest.mark.parametrize("formula", ["1 + 2", "abc", "1+2;", "__import__('os')", "٣+1", "2²", "1.5*16"])
def test_text_outside_the_grammar_is_illegal(formula):
    with pytest.raises(IllegalCharacters):
        tokenize(formula)


def test_power_lexes_but_is_not_arithmetic():
    assert sequence_errors(tokenize("2**3")) == ["invalid sequence after operator"]
    with pytest.raises(EvaluationError):
        evaluate("2**3")


def test_nesting_and_length_limits():
    # CPython's own limit: 200 levels evaluate, 201 are a syntax error.
    deep_ok = "(" * (MAX_NESTING - 1) + "5*(5-1/5)" + ")" * (MAX_NESTING - 1)
    assert MAX_NESTING == 200 and evaluate(deep_ok) == 24
    with pytest.raises(EvaluationError, match="nested"):
        evaluate("(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1))
    with pytest.raises(IllegalCharacters, match="longer"):
        tokenize("1+" * MAX_FORMULA_CHARS + "1")
    # A million brackets: rejected by length, before any parsing work.
    with pytest.raises(IllegalCharacters):
        evaluate("(" * 1_000_000 + "1" + ")" * 1_000_000)


def test_intermediate_values_are_capped():
    huge = Fraction(2) ** 1000
    with pytest.raises(EvaluationError, match="too large"):
        apply_operator("*", huge, huge)
    big = "*".join(["999999999999"] * 19)  # ~760 bits: exact
    assert evaluate(big) == 999999999999**19
    with pytest.raises(EvaluationError, match="too large"):  # ~1600 bits, still within the length limit
        evaluate("*".join(["999999999999"] * 40))


def test_sequence_errors_follow_the_reference_messages():
    assert sequence_errors(tokenize("1+2")) == []
    assert sequence_errors(tokenize("+1")) == ["invalid sequence after operator"]
    assert sequence_errors(tokenize("1++2")) == ["invalid sequence after operator"]
    # As in the reference, a rejected '(' is not pushed, so its ')' is then unmatched too.
    assert sequence_errors(tokenize("(1)(2)")) == ["invalid sequence before '('", "unmatched closing parenthesis"]
    assert sequence_errors(tokenize("1)")) == ["unmatched closing parenthesis"]
    assert sequence_errors(tokenize("(+)")) == ["invalid sequence after operator", "invalid sequence after ')'"]
    # Dangling operator and unclosed bracket pass this check (they fail evaluation instead).
    assert sequence_errors(tokenize("(1+2*")) == []


def test_numbers_in():
    assert numbers_in("(10-2)*3+007") == [10, 2, 3, 7]
