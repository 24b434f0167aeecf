"""The GeneralPoints gymnasium env (``spatialrl/GeneralPoints-v0``): make the target from four cards."""

from __future__ import annotations

import string
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from spatialrl.envs.gp.answer import MAX_RESPONSE_CHARS, format_answer, parse_answer
from spatialrl.envs.gp.card_images import render_table
from spatialrl.envs.gp.cards import Card, Hand, deal, make_hand
from spatialrl.envs.gp.rewards import Outcome, cards_match, verify
from spatialrl.envs.gp.solver import BRACKETS, formula_tokens
from spatialrl.envs.gp.variants import Variant, get_variant
from spatialrl.errors import DataError

MODES = ("vl", "l")
TEXT_CHARSET = string.printable
_VARIANT_KEYS = ("face_cards_as_10", "colors", "force_face_card", "verify_iter")


class GeneralPointsEnv(gym.Env):
    """GeneralPoints, the card task of "SFT Memorizes, RL Generalizes" (its ``GeneralPoint-oneline-v0``).

    **Description.** Four cards are dealt face up; the agent answers with one JSON-like message naming
    the cards it sees, their numbers, and one formula that uses each card's number exactly once to make
    the target (24). The env reads and verifies the answer itself (:mod:`spatialrl.envs.gp.rewards`).

    **Action space.** ``Text``: the model's raw answer (cut to 16,384 characters before parsing).

    **Observation space.** ``mode="vl"``: the table image, uint8 (resolution, resolution, 3), the same
    picture (a fresh copy) at every step of an episode. ``mode="l"``: the plain card names as text,
    e.g. ``"['A', '3', 'K', '6']"`` (the prompt shows them).

    **Rewards.** CORRECT_SOLUTION +5, PARTIAL_SOLUTION +1, NO_SOLUTION −1, INCORRECT_VISION −1.5
    (VL only), INCORRECT_NUMBER −2, ILLEGAL_FORMULA −3; penalties of one answer add up.

    **Starting state.** ``reset(seed, options)``: ``options["split"]`` picks the variant (see
    :mod:`spatialrl.envs.gp.variants`); ``options["cards"]`` (codes like ``["HA", "S5", "D5", "C5"]``)
    fixes the hand instead of dealing; ``verify_iter``/``face_cards_as_10``/``colors``/``force_face_card``
    override the variant. The deal uses only ``self.np_random``.

    **Episode end.** Terminated on a correct solution; truncated after ``verify_iter`` answers (5; 1 for
    the recognition split). The reference spends a sixth, ignored model call per failed episode to
    learn that the budget is gone (reward −1, "step_limit_reached"); we stop at the fifth answer.

    **Info.** Every step: ``expert_response``, ``candidate_responses``, ``record``, and the hand
    (``cards``, ``plain_cards``, ``numbers``, ``target``, ``face_cards_as_10``), ``split``, ``mode``,
    ``verify_info`` (the last verifier message, ``None`` after reset), ``remaining_steps``, ``success``;
    the final step adds ``episode``.

    **Arguments.** ``mode`` vl|l, ``split``, ``target`` (24), ``resolution`` (1200, the reference's),
    ``n_candidates`` (answers offered to the random agent), ``render_mode`` (None | "rgb_array").
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    def __init__(
        self,
        mode: str = "vl",
        split: str = "in-dist",
        target: int = 24,
        resolution: int = 1200,
        n_candidates: int = 8,
        render_mode: str | None = None,
    ):
        if mode not in MODES:
            raise DataError(f"gp option 'mode': expected one of {MODES}, got {mode!r}")
        if render_mode not in (None, "rgb_array"):
            raise DataError(f"gp render_mode: expected None or 'rgb_array', got {render_mode!r}")
        if n_candidates < 1:
            raise DataError(f"gp option 'n_candidates': must be >= 1, got {n_candidates}")
        get_variant(split)  # validate early
        self.mode, self.split, self.target = mode, split, int(target)
        self.resolution, self.n_candidates, self.render_mode = int(resolution), int(n_candidates), render_mode
        if mode == "vl":
            self.observation_space = spaces.Box(0, 255, (self.resolution, self.resolution, 3), np.uint8)
        else:
            self.observation_space = spaces.Text(max_length=64, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=MAX_RESPONSE_CHARS, min_length=0, charset=TEXT_CHARSET)
        self.hand: Hand | None = None
        self.variant: Variant | None = None
        self._image: np.ndarray | None = None

    # ----------------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        split = str(options.pop("split", self.split))
        overrides = {k: options.pop(k) for k in _VARIANT_KEYS if k in options}
        cards = options.pop("cards", None)
        if options:
            raise DataError(f"gp reset options: unknown key(s) {sorted(options)}")
        self.variant = get_variant(split, overrides)
        if cards is not None:
            if isinstance(cards, str):
                cards = cards.replace(",", " ").split()
            parsed = [Card.parse(str(c)) for c in cards]
            if len(parsed) != 4:
                raise DataError(f"gp reset option 'cards': need 4 cards, got {len(parsed)}")
            self.hand = make_hand(parsed, self.variant.face_cards_as_10, self.target)
            if not self.hand.solutions:
                raise DataError(f"gp reset option 'cards': {cards} cannot make {self.target}")
        else:
            self.hand = deal(self.np_random, self.variant, self.target)
        self._expert_formula = self.hand.solutions[int(self.np_random.integers(len(self.hand.solutions)))]
        self._candidate_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        self._image = render_table(self.hand.cards, self.resolution) if self.mode == "vl" else None
        self._attempts = 0
        self._done = False
        self._success = False
        self._verify_info: str | None = None
        self._outcomes: Counter[str] = Counter()
        self._recognition: list[bool] = []
        return self._observation(), self._info(record={"attempt": 0})

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.hand is None or self.variant is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        hand = self.hand
        answer = parse_answer(action if isinstance(action, str) else str(action))
        verdict = verify(answer, hand.numbers, hand.plain_cards, hand.solutions, self.target,
                         check_vision=self.mode == "vl")
        self._attempts += 1
        recognised = cards_match(answer.cards, hand.plain_cards)
        self._recognition.append(recognised)
        self._outcomes[verdict.outcome.value] += 1
        self._verify_info = verdict.verify_info
        self._success = verdict.success
        terminated = verdict.success
        truncated = not terminated and self._attempts >= self.variant.verify_iter
        self._done = terminated or truncated
        record = {
            "attempt": self._attempts,
            "outcome": verdict.outcome.value,
            "outcomes": [o.value for o in verdict.outcomes],
            "verify_info": verdict.verify_info,
            "formula": verdict.formula,
            "value": None if verdict.value is None else str(verdict.value),
            "cards_read": None if answer.cards is None else list(answer.cards),
            "numbers_read": None if answer.numbers is None else list(answer.numbers),
            "recognition_correct": recognised,
        }
        info = self._info(record=record)
        if self._done:
            info["episode"] = self._episode_fields()
        return self._observation(), verdict.reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array" or self.hand is None:
            return None
        if self._image is None:
            self._image = render_table(self.hand.cards, self.resolution)
        return self._image.copy()

    # ------------------------------------------------------------------------------- internals
    def _observation(self) -> Any:
        assert self.hand is not None
        if self.mode == "vl":
            assert self._image is not None
            return self._image.copy()  # gymnasium: callers keep what they get, so never share it
        return repr(self.hand.plain_cards)

    def expert_response(self) -> str:
        """A correct answer for the current hand: the dealt cards, their numbers, a solution ``=target``."""
        assert self.hand is not None
        return format_answer(self.hand.plain_cards, self.hand.numbers, f"{self._expert_formula}={self.target}")

    def candidate_responses(self) -> list[str]:
        """Well-formed guesses: the cards in a random order, their numbers, three random operators in a
        random one of the reference's bracket layouts. Some are right by chance (the random baseline)."""
        assert self.hand is not None
        rng, hand = self._candidate_rng, self.hand
        out = []
        for _ in range(self.n_candidates):
            order = [int(i) for i in rng.permutation(len(hand.cards))]
            cards = [hand.plain_cards[i] for i in order]
            numbers = [hand.numbers[i] for i in order]
            ops = tuple(str(o) for o in rng.choice(list("+-*/"), size=3))
            layout = BRACKETS[int(rng.integers(len(BRACKETS)))]
            formula = "".join(str(numbers[t]) if isinstance(t, int) else t for t in formula_tokens(ops, layout))
            out.append(format_answer(cards, numbers, f"{formula}={self.target}"))
        return out

    def _info(self, record: dict[str, Any]) -> dict[str, Any]:
        assert self.hand is not None and self.variant is not None
        return {
            "expert_response": self.expert_response(),
            "candidate_responses": self.candidate_responses(),
            "record": record,
            "cards": self.hand.codes,
            "plain_cards": self.hand.plain_cards,
            "numbers": self.hand.numbers,
            "target": self.target,
            "face_cards_as_10": self.variant.face_cards_as_10,
            "split": self.variant.name,
            "mode": self.mode,
            "verify_info": self._verify_info,
            "remaining_steps": self.variant.verify_iter - self._attempts,
            "success": self._success,
            "solutions": list(self.hand.solutions),
        }

    def _episode_fields(self) -> dict[str, Any]:
        assert self.hand is not None and self.variant is not None
        return {
            "success": self._success,
            "attempts": self._attempts,
            "split": self.variant.name,
            "mode": self.mode,
            "cards": self.hand.codes,
            "plain_cards": self.hand.plain_cards,
            "numbers": self.hand.numbers,
            "target": self.target,
            "face_cards_as_10": self.variant.face_cards_as_10,
            "expert_formula": self._expert_formula,
            "outcome_counts": {o.value: self._outcomes.get(o.value, 0) for o in Outcome},
            "recognition_steps": len(self._recognition),
            "recognition_correct_steps": sum(self._recognition),
            "recognition_correct": bool(self._recognition and self._recognition[0]),
        }
