"""Reading answers: the reference's JSON-or-regex reading, without its empty-list accidents."""

from __future__ import annotations

from spatialrl.envs.gp.answer import MAX_RESPONSE_CHARS, format_answer, parse_answer


def test_reference_format_with_trailing_comma_round_trips():
    text = format_answer(["A", "3", "K", "6"], [1, 3, 10, 6], "(1+6)*3+10=24")
    assert text.startswith("{\n") and text.endswith('",\n}')  # the ResponseEqn layout
    answer = parse_answer(text)
    assert answer.cards == ("A", "3", "K", "6")
    assert answer.numbers == ("1", "3", "10", "6")
    assert answer.formula == "(1+6)*3+10=24"


def test_valid_json_double_quotes_and_bare_numbers():
    a = parse_answer('{"cards": ["J", "5", "3", "K"], "number": [10, 5, 3, 10], "formula": "(10-5)*3+10"}')
    assert a.cards == ("J", "5", "3", "K") and a.numbers == ("10", "5", "3", "10") and a.formula == "(10-5)*3+10"
    b = parse_answer('Sure! "cards": [2, 3, 4, 5],  "formula":"2*3*4"  and more')
    assert b.cards == ("2", "3", "4", "5") and b.formula == "2*3*4" and b.numbers is None


def test_missing_and_malformed_fields_are_none():
    assert parse_answer("I don't know") == parse_answer("")
    a = parse_answer('{"cards": ["A", "2", "3"], "formula": null}')
    assert a.cards is None and a.formula is None
    assert parse_answer('{"cards": 5, "formula": 24}').formula == "24"
    assert parse_answer("[1, 2, 3]").cards is None  # JSON but not an object
    assert parse_answer('{"formula": "' + "[" * 5000).formula is None


def test_long_answers_are_cut_before_parsing():
    text = '"formula": "1+2+3+4"' + " " * MAX_RESPONSE_CHARS + '"cards": [1, 2, 3, 4]'
    answer = parse_answer(text)
    assert answer.formula == "1+2+3+4" and answer.cards is None
