"""The GeneralPoints splits: which rule, which suit colours, which deal, how many verification attempts.

Each split is one setting of the reference env's constructor (``GeneralPointEnv_oneline``) and of the
evaluator's ``enable_verification`` / ``verify_iter`` flags (reference notes §5, ``scripts/gp_*``):

==============  ================  ===========  =======================  ==========
split           J/Q/K count as    suit colour  deal                     attempts
==============  ================  ===========  =======================  ==========
``in-dist``     10                black        4 cards, 1..13           5
``rule-ood``    11, 12, 13        black        3 cards + one J/Q/K      5
``visual-ood``  10                red          4 cards, 1..13           5
``recognition`` 10                black        4 cards, 1..13           1
==============  ================  ===========  =======================  ==========

Training uses black suits (``vl_train.sh``: ``face_cards_color=black``), so red suits are the visual
shift. The reference's rule-OOD deal (``ood=True``) forces at least one face card so the new rule
matters in every hand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from spatialrl.errors import DataError

SuitColors = Literal["black", "red", "mixed"]
SUITS_BY_COLOR: dict[str, tuple[str, ...]] = {
    "mixed": ("H", "S", "D", "C"),
    "red": ("H", "D"),
    "black": ("S", "C"),
}
DEFAULT_VERIFY_ITER = 5  # the paper's GP setting (reference notes §4.4: VITER=5)


@dataclass(frozen=True)
class Variant:
    """One deal-and-rule setting. ``face_cards_as_10`` is the reference's ``treat_face_cards_as_10``;
    ``force_face_card`` its ``ood`` flag (one of the four cards is drawn from J/Q/K)."""

    name: str
    face_cards_as_10: bool = True
    colors: SuitColors = "black"
    force_face_card: bool = False
    verify_iter: int = DEFAULT_VERIFY_ITER

    def __post_init__(self) -> None:
        if self.colors not in SUITS_BY_COLOR:
            raise DataError(f"gp variant {self.name!r}: colors must be one of {sorted(SUITS_BY_COLOR)}, "
                            f"got {self.colors!r}")
        if self.verify_iter < 1:
            raise DataError(f"gp variant {self.name!r}: verify_iter must be >= 1, got {self.verify_iter}")


SPLITS: dict[str, Variant] = {
    "in-dist": Variant("in-dist"),
    "rule-ood": Variant("rule-ood", face_cards_as_10=False, force_face_card=True),
    "visual-ood": Variant("visual-ood", colors="red"),
    "recognition": Variant("recognition", verify_iter=1),
}


def get_variant(split: str, overrides: dict[str, Any] | None = None) -> Variant:
    """The variant of ``split`` with optional field overrides (e.g. ``{"verify_iter": 1}``)."""
    if split not in SPLITS:
        raise DataError(f"gp option 'split': unknown split {split!r}; known: {', '.join(SPLITS)}")
    variant = SPLITS[split]
    if overrides:
        unknown = set(overrides) - {"face_cards_as_10", "colors", "force_face_card", "verify_iter"}
        if unknown:
            raise DataError(f"gp variant overrides: unknown field(s) {sorted(unknown)}")
        variant = replace(variant, **overrides)
    return variant


def face_card_message(face_cards_as_10: bool) -> str:
    """The reference's ``face_card_msg``, byte for byte (its trailing period included)."""
    if face_cards_as_10:
        return "'J', 'Q', and 'K' count as '10'."
    return "'J', 'Q', and 'K' count as '11', '12', and '13' respectively."
