"""The answer format: what the model writes, how we read it, and the expert's answer in that format.

The reference answer (``prompt_lib.ResponseEqn``) is JSON-like, with a trailing comma that makes it
invalid JSON, so reading falls back to regular expressions (``utils_general.re_match``)::

    {
      "cards": ['A', '3', 'K', '6'],
      "number": [1, 3, 10, 6],
      "formula": "(1+6)*3+10=24",
    }

Reading is the reference's (JSON first, then ``"key": [...]`` / ``"key": "..."`` patterns, lists must
have exactly four items), with two of its accidents fixed: a list read from valid JSON, or written with
double quotes or bare numbers, counts (the reference turns those into an empty list and so into
INCORRECT_VISION); and any whitespace after the colon is accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MAX_RESPONSE_CHARS = 16_384  # longer answers are cut before parsing (a budget, not a format rule)
LIST_RE = {key: re.compile(rf'"{key}":\s*\[([^\]]+)\]') for key in ("cards", "number")}
FORMULA_RE = re.compile(r'"formula":\s*"(.*?)"')
N_ITEMS = 4

RESPONSE_TEMPLATE = """{{
  "cards": {cards},
  "number": {numbers},
  "formula": "{formula}",
}}"""


@dataclass(frozen=True)
class Answer:
    """The fields read from one response; ``None`` where a field is missing or malformed."""

    cards: tuple[str, ...] | None
    numbers: tuple[str, ...] | None
    formula: str | None


def _clean_items(items: list[Any]) -> tuple[str, ...] | None:
    out = tuple(str(x).strip().strip("'\"").strip() for x in items)
    return out if len(out) == N_ITEMS else None


def _list_field(data: dict[str, Any] | None, text: str, key: str) -> tuple[str, ...] | None:
    if data is not None and key in data:
        value = data[key]
        if isinstance(value, list):
            return _clean_items(value)
        if isinstance(value, str):
            return _clean_items(value.strip().strip("[]").split(","))
        return None
    match = LIST_RE[key].search(text)
    return _clean_items(match.group(1).split(",")) if match else None


def _formula_field(data: dict[str, Any] | None, text: str) -> str | None:
    if data is not None and "formula" in data:
        value = data["formula"]
        return None if value is None else str(value)
    match = FORMULA_RE.search(text)
    return match.group(1) if match else None


def parse_answer(text: str) -> Answer:
    """Read cards, numbers and formula from a model response (never raises)."""
    text = str(text)[:MAX_RESPONSE_CHARS]
    data: dict[str, Any] | None = None
    try:
        loaded = json.loads(text)
        if isinstance(loaded, dict):
            data = loaded
    except (ValueError, RecursionError):
        data = None
    return Answer(
        cards=_list_field(data, text, "cards"),
        numbers=_list_field(data, text, "number"),
        formula=_formula_field(data, text),
    )


def format_answer(cards: list[str], numbers: list[int], formula: str) -> str:
    """An answer in the reference format: Python list reprs for cards and numbers, as ``ResponseEqn``
    produces them (its leading newline dropped)."""
    return RESPONSE_TEMPLATE.format(cards=repr([str(c) for c in cards]), numbers=repr([int(n) for n in numbers]),
                                    formula=formula)
