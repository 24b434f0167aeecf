"""The verifier: one answer → an outcome, a reward and the message the model reads on its next try.

Six outcomes with the reference's rewards (``utils_rl.REWARD_FN``); the checks run in the reference's
order and its penalties *accumulate* within one answer (three sequence errors cost 3 × −3):

1. VL only — the recognised cards, sorted, differ from the dealt cards: INCORRECT_VISION −1.5 and stop
   (message ``you recognized wrong cards``, without the final period, exactly as the reference).
2. Characters other than ASCII digits and ``+ - * / ( )`` (spaces included), or a formula over 1,024
   characters: ILLEGAL_FORMULA −3 and stop.
3. Each bad neighbour pair / unmatched ``)``: ILLEGAL_FORMULA −3.
4. Numbers not on the cards or used too often: INCORRECT_NUMBER −2; cards left unused: another −2.
5. No penalty so far: the exact value equals the target → CORRECT_SOLUTION +5 (ends the episode). If
   the formula cannot be evaluated (unclosed bracket, dangling operator, x/0, too deep) but is the
   start of a known solution → PARTIAL_SOLUTION +1.
6. Otherwise NO_SOLUTION −1, naming the longest prefix that still matches a solution.

A step's ``outcome`` is its most severe one (lowest reward), so per-step outcome rates add up to one.
The reference's own stats map an accumulated reward that matches no single outcome to
"AGGREGATED_ERROR"; we keep every outcome of a step in ``outcomes`` instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from spatialrl.envs.gp.answer import Answer
from spatialrl.envs.gp.equation import (
    FormulaError,
    IllegalCharacters,
    evaluate,
    numbers_in,
    sequence_errors,
    tokenize,
)


class Outcome(StrEnum):
    CORRECT_SOLUTION = "CORRECT_SOLUTION"
    PARTIAL_SOLUTION = "PARTIAL_SOLUTION"
    NO_SOLUTION = "NO_SOLUTION"
    INCORRECT_VISION = "INCORRECT_VISION"
    INCORRECT_NUMBER = "INCORRECT_NUMBER"
    ILLEGAL_FORMULA = "ILLEGAL_FORMULA"


REWARDS: dict[Outcome, float] = {
    Outcome.CORRECT_SOLUTION: 5.0,
    Outcome.PARTIAL_SOLUTION: 1.0,
    Outcome.NO_SOLUTION: -1.0,
    Outcome.INCORRECT_VISION: -1.5,
    Outcome.INCORRECT_NUMBER: -2.0,
    Outcome.ILLEGAL_FORMULA: -3.0,
}
MSG_CORRECT = "Correct solution"
MSG_WRONG_CARDS = "you recognized wrong cards"


@dataclass(frozen=True)
class Verdict:
    outcomes: tuple[Outcome, ...]
    messages: tuple[str, ...]
    formula: str | None  # the formula checked (text before '='), None when the answer had none
    value: Fraction | None = None  # its exact value when it could be evaluated
    vision_only: bool = False  # stopped at the card check (reference message has no final period)

    @property
    def reward(self) -> float:
        return float(sum(REWARDS[o] for o in self.outcomes))

    @property
    def outcome(self) -> Outcome:
        return min(self.outcomes, key=lambda o: REWARDS[o])

    @property
    def success(self) -> bool:
        return self.outcomes == (Outcome.CORRECT_SOLUTION,)

    @property
    def verify_info(self) -> str:
        """The reference's ``Verify Info``: messages joined by ', ' and closed with '.'."""
        if self.vision_only:
            return self.messages[0]
        return ", ".join(self.messages) + "."


class _Stepper:
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.messages: list[str] = []

    def add(self, outcome: Outcome, message: str) -> None:
        self.outcomes.append(outcome)
        self.messages.append(message)


def cards_match(recognised: Sequence[str] | None, dealt: Sequence[str]) -> bool:
    """The reference's recognition test: same multiset of plain card names (order free)."""
    return recognised is not None and sorted(recognised) == sorted(dealt)


def verify(
    answer: Answer,
    numbers: Sequence[int],
    plain_cards: Sequence[str],
    solutions: Sequence[str],
    target: int,
    check_vision: bool,
) -> Verdict:
    """Score one parsed answer against the dealt hand (see the module docstring for the rules)."""
    if check_vision and not cards_match(answer.cards, plain_cards):
        return Verdict((Outcome.INCORRECT_VISION,), (MSG_WRONG_CARDS,), answer.formula, vision_only=True)

    # The reference reads a missing formula as the string "None": illegal characters.
    formula = "None" if answer.formula is None else answer.formula.split("=")[0]
    step = _Stepper()
    try:
        tokens = tokenize(formula)
    except IllegalCharacters as e:
        step.add(Outcome.ILLEGAL_FORMULA, e.reason)
        return Verdict(tuple(step.outcomes), tuple(step.messages), formula)
    for message in sequence_errors(tokens):
        step.add(Outcome.ILLEGAL_FORMULA, message)

    used = Counter(numbers_in(formula))
    have = Counter(int(n) for n in numbers)
    invalid = [n for n in used if n not in have]
    overused = [n for n in used if used[n] > have[n]]
    if invalid:
        step.add(Outcome.INCORRECT_NUMBER, f"you used invalid numbers: {invalid}")
    elif overused:
        step.add(Outcome.INCORRECT_NUMBER, f"you used numbers: {overused} too many times")
    underused = [n for n in have if have[n] > used[n]]
    if underused:
        step.add(Outcome.INCORRECT_NUMBER, f"you didn't use numbers: {underused}")
    if step.outcomes:
        return Verdict(tuple(step.outcomes), tuple(step.messages), formula)

    value: Fraction | None = None
    try:
        value = evaluate(formula)
    except FormulaError:
        if any(s.startswith(formula) for s in solutions):
            step.add(Outcome.PARTIAL_SOLUTION, "partial solution")
            return Verdict(tuple(step.outcomes), tuple(step.messages), formula)
    if value is not None and value == target:
        step.add(Outcome.CORRECT_SOLUTION, MSG_CORRECT)
        return Verdict(tuple(step.outcomes), tuple(step.messages), formula, value)

    register = ""
    for token in tokens:
        previous, register = register, register + token
        if not any(s.startswith(register) for s in solutions):
            if previous == "":
                step.add(Outcome.NO_SOLUTION, "your formula does not match any solution")
            else:
                step.add(Outcome.NO_SOLUTION,
                         f"{previous} is partially correct but the full formula does not match any solution")
            break
    if not step.outcomes:  # every prefix matched yet no value: cannot happen with four numbers; be safe
        step.add(Outcome.NO_SOLUTION, "your formula does not match any solution")
    return Verdict(tuple(step.outcomes), tuple(step.messages), formula, value)
