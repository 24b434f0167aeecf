"""Cards and dealing: four cards drawn with replacement, redrawn until the hand can make the target.

Names follow the reference: a card is ``suit + rank`` (``"HK"``, ``"S10"``), its *plain* name is the
rank alone as the model must write it (``A, 2..10, J, Q, K``). The reference env names ten ``'T'`` and
maps it to ``'10'`` in its "Plain Cards"; we use ``'10'`` throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spatialrl.envs.gp.solver import solutions
from spatialrl.envs.gp.variants import SUITS_BY_COLOR, Variant
from spatialrl.errors import DataError

RANK_NAMES = {1: "A", 11: "J", 12: "Q", 13: "K"}
NAME_RANKS = {**{str(r): r for r in range(2, 11)}, "A": 1, "J": 11, "Q": 12, "K": 13}
SUIT_NAMES = {"H": "hearts", "D": "diamonds", "S": "spades", "C": "clubs"}
MAX_DEAL_TRIES = 10_000


def rank_name(rank: int) -> str:
    """``1 -> 'A'``, ``10 -> '10'``, ``13 -> 'K'``."""
    if not 1 <= rank <= 13:
        raise ValueError(f"card rank must be in 1..13, got {rank}")
    return RANK_NAMES.get(rank, str(rank))


def card_value(rank: int, face_cards_as_10: bool) -> int:
    """The number a card stands for in the equation (J/Q/K are 10, or 11/12/13 under the OOD rule)."""
    return min(rank, 10) if face_cards_as_10 else rank


@dataclass(frozen=True)
class Card:
    rank: int  # 1 (ace) .. 13 (king)
    suit: str  # H, D, S, C

    @property
    def name(self) -> str:
        return rank_name(self.rank)

    @property
    def code(self) -> str:
        return self.suit + self.name

    @property
    def is_red(self) -> bool:
        return self.suit in ("H", "D")

    @classmethod
    def parse(cls, code: str) -> Card:
        """``"HK"`` / ``"s10"`` → Card; the error names the bad code."""
        text = code.strip().upper()
        if len(text) < 2 or text[0] not in SUIT_NAMES or text[1:] not in NAME_RANKS:
            raise DataError(f"card {code!r}: expected a suit letter (H, D, S, C) then a rank (A, 2..10, J, Q, K)")
        return cls(rank=NAME_RANKS[text[1:]], suit=text[0])


@dataclass(frozen=True)
class Hand:
    """A dealt hand and everything the verifier needs about it."""

    cards: tuple[Card, ...]
    face_cards_as_10: bool
    target: int
    solutions: tuple[str, ...]  # every reference-form formula reaching the target (see solver.py)

    @property
    def numbers(self) -> list[int]:
        return [card_value(c.rank, self.face_cards_as_10) for c in self.cards]

    @property
    def plain_cards(self) -> list[str]:
        return [c.name for c in self.cards]

    @property
    def codes(self) -> list[str]:
        return [c.code for c in self.cards]


def make_hand(cards: list[Card], face_cards_as_10: bool, target: int) -> Hand:
    """A hand from given cards (the CLI's ``show --cards``, tests). Unsolvable hands are allowed here:
    they simply have no solutions."""
    numbers = [card_value(c.rank, face_cards_as_10) for c in cards]
    return Hand(tuple(cards), face_cards_as_10, target, solutions(numbers, target))


def _draw(rng: np.random.Generator, variant: Variant) -> list[Card]:
    if variant.force_face_card:
        # Reference ``ood=True``: three cards of 1..13 plus one of J/Q/K, then shuffled.
        ranks = [int(r) for r in rng.integers(1, 14, size=3)] + [int(rng.integers(11, 14))]
        ranks = [ranks[i] for i in rng.permutation(4)]
    else:
        ranks = [int(r) for r in rng.integers(1, 14, size=4)]
    suits = SUITS_BY_COLOR[variant.colors]
    return [Card(rank, suits[int(rng.integers(len(suits)))]) for rank in ranks]


def deal(rng: np.random.Generator, variant: Variant, target: int = 24) -> Hand:
    """Deal four cards with replacement (as the reference's ``randint(1, 13)`` does; the paper says
    "a deck of 52" but the code never removes a card), redrawing until the hand has a solution."""
    for _ in range(MAX_DEAL_TRIES):
        hand = make_hand(_draw(rng, variant), variant.face_cards_as_10, target)
        if hand.solutions:
            return hand
    raise DataError(f"gp option 'target': no solvable hand for target {target} in {MAX_DEAL_TRIES} deals")
