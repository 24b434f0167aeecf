"""Every reward outcome, their accumulation, the messages the model reads, and the OOD rule's numbers."""

from __future__ import annotations

import pytest

from spatialrl.envs.gp.answer import Answer, format_answer, parse_answer
from spatialrl.envs.gp.cards import Card, make_hand
from spatialrl.envs.gp.rewards import REWARDS, Outcome, verify

HAND = make_hand([Card.parse(c) for c in ("HA", "S5", "D5", "C5")], face_cards_as_10=True, target=24)


def judge(formula: str | None, cards=("A", "5", "5", "5"), check_vision=False, hand=HAND):
    return verify(Answer(tuple(cards) if cards else None, None, formula), hand.numbers, hand.plain_cards,
                  hand.solutions, hand.target, check_vision)


@pytest.mark.parametrize(
    ("formula", "outcome", "reward", "info"),
    [
        ("5*(5-1/5)=24", Outcome.CORRECT_SOLUTION, 5, "Correct solution."),
        ("(5-1/5)*5", Outcome.CORRECT_SOLUTION, 5, "Correct solution."),
        ("5*((5-1/5))", Outcome.CORRECT_SOLUTION, 5, "Correct solution."),  # right value, any form
        ("5*(5-1/5", Outcome.PARTIAL_SOLUTION, 1, "partial solution."),
        ("(5-1/5)*", Outcome.INCORRECT_NUMBER, -2, "you didn't use numbers: [5]."),
        ("5*5-1/5", Outcome.NO_SOLUTION, -1,
         "5* is partially correct but the full formula does not match any solution."),
        ("1+5+5+5", Outcome.NO_SOLUTION, -1, "your formula does not match any solution."),
        ("5/(5-5)+1", Outcome.NO_SOLUTION, -1,
         "5 is partially correct but the full formula does not match any solution."),
        ("5 * (5 - 1/5)", Outcome.ILLEGAL_FORMULA, -3, "illegal characters."),
        ("5*(5-1÷5)", Outcome.ILLEGAL_FORMULA, -3, "illegal characters."),
        (None, Outcome.ILLEGAL_FORMULA, -3, "illegal characters."),
        ("6*4", Outcome.INCORRECT_NUMBER, -4, "you used invalid numbers: [6, 4], you didn't use numbers: [1, 5]."),
        ("5*5-1", Outcome.INCORRECT_NUMBER, -2, "you didn't use numbers: [5]."),
        ("5*5*5*5-1", Outcome.INCORRECT_NUMBER, -2, "you used numbers: [5] too many times."),
        ("5**5-1/5+5", Outcome.ILLEGAL_FORMULA, -5,
         "invalid sequence after operator, you used numbers: [5] too many times."),
        ("((5*(5-1/5)", Outcome.NO_SOLUTION, -1,
         "( is partially correct but the full formula does not match any solution."),
    ],
)
def test_outcomes_rewards_and_messages(formula, outcome, reward, info):
    verdict = judge(formula)
    assert verdict.outcome is outcome
    assert verdict.reward == reward
    assert verdict.verify_info == info
    assert verdict.success == (outcome is Outcome.CORRECT_SOLUTION)


def test_every_outcome_is_reachable_and_rewards_match_the_reference():
    assert REWARDS == {Outcome.CORRECT_SOLUTION: 5, Outcome.PARTIAL_SOLUTION: 1, Outcome.NO_SOLUTION: -1,
                       Outcome.INCORRECT_VISION: -1.5, Outcome.INCORRECT_NUMBER: -2, Outcome.ILLEGAL_FORMULA: -3}
    seen = {judge(f).outcome for f in ("5*(5-1/5)", "5*(5-1/5", "1+5+5+5", "6*4", "5 5")}
    seen.add(judge("5*(5-1/5)", cards=("A", "5", "5", "4"), check_vision=True).outcome)
    assert seen == set(Outcome)


def test_vision_check_only_in_vl_and_order_free():
    wrong = judge("5*(5-1/5)", cards=("A", "5", "5", "4"), check_vision=True)
    assert (wrong.outcome, wrong.reward, wrong.verify_info) == (Outcome.INCORRECT_VISION, -1.5,
                                                                "you recognized wrong cards")
    assert judge("5*(5-1/5)", cards=None, check_vision=True).outcome is Outcome.INCORRECT_VISION
    assert judge("5*(5-1/5)", cards=("5", "A", "5", "5"), check_vision=True).success
    assert judge("5*(5-1/5)", cards=("A", "5", "5", "4"), check_vision=False).success  # L mode


def test_bracket_nesting_beyond_pythons_limit_is_no_solution_not_a_crash():
    ok = judge("(" * 199 + "5*(5-1/5)" + ")" * 199)
    assert ok.success  # CPython evaluates 200 levels, and so do we
    too_deep = judge("(" * 200 + "5*(5-1/5)" + ")" * 200)
    assert too_deep.outcome is Outcome.NO_SOLUTION
    huge = judge("(" * 5000 + "5*(5-1/5)" + ")" * 5000)
    assert huge.outcome is Outcome.ILLEGAL_FORMULA and "longer than" in huge.verify_info


def test_rule_ood_arithmetic():
    cards = [Card.parse(c) for c in ("SK", "SQ", "C2", "S2")]
    ood = make_hand(cards, face_cards_as_10=False, target=24)
    ind = make_hand(cards, face_cards_as_10=True, target=24)
    assert ood.numbers == [13, 12, 2, 2] and ind.numbers == [10, 10, 2, 2]
    assert judge("13+12-2", cards=None, hand=ood).outcome is Outcome.INCORRECT_NUMBER  # a 2 unused
    assert judge("13-12+2*2", cards=None, hand=ood).outcome is Outcome.NO_SOLUTION  # = 5
    assert judge("13+12-2/2", cards=None, hand=ood).success  # 24 only when K=13, Q=12
    assert judge("13+12-2/2", cards=None, hand=ind).outcome is Outcome.INCORRECT_NUMBER
    assert judge("10+10+2+2", cards=None, hand=ind).success
    assert judge("10+10+2+2", cards=None, hand=ood).outcome is Outcome.INCORRECT_NUMBER
    assert judge("10*2+2", cards=None, hand=ind).outcome is Outcome.INCORRECT_NUMBER  # a 10 unused
    assert ood.solutions and ind.solutions
    assert all(judge(s, cards=None, hand=ood).success for s in ood.solutions)
    assert all(judge(s, cards=None, hand=ind).success for s in ind.solutions)


def test_expert_format_is_scored_through_the_parser():
    text = format_answer(HAND.plain_cards, HAND.numbers, "5*(5-1/5)=24")
    verdict = verify(parse_answer(text), HAND.numbers, HAND.plain_cards, HAND.solutions, 24, check_vision=True)
    assert verdict.success and verdict.value == 24
