"""The GeneralPoints task suite: how ``spatialrl eval --task gp`` (and SFT/RL) meet the card env.

Options (``--split``, ``--set key=value``):

=================  ===========  ====================================================================
option             default      meaning
=================  ===========  ====================================================================
``split``          in-dist      in-dist | rule-ood | visual-ood | recognition, a comma list, or all
``mode``           vl           vl (card image) | l (card names in text)
``episodes``       234          hands per split (the reference's ``NUM_TRAJ=234``)
``seed``           0            seeds every hand (episode i of a split gets its own derived seed)
``limit``          none         at most this many hands per split
``verify_iter``    split's      answers per episode (5; 1 for recognition), the paper's ablation knob
``target``         24
``resolution``     1200         table image side in pixels (the reference's)
``example``        false        use the reference's ``_EG`` prompts (with an output example)
``cot``            false        ask for ``<think>…</think>`` reasoning before the answer (ours)
``n_candidates``   8            answers offered to the random agent per step
=================  ===========  ====================================================================
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.gp.env import MODES, GeneralPointsEnv
from spatialrl.envs.gp.metrics import summarize
from spatialrl.envs.gp.prompts import GPPrompter
from spatialrl.envs.gp.thoughts import gp_thought
from spatialrl.envs.gp.variants import SPLITS
from spatialrl.envs.registry import EpisodeSpec, TaskSuite, register_suite
from spatialrl.errors import DataError

DEFAULT_OPTIONS: dict[str, Any] = {
    "split": "in-dist",
    "mode": "vl",
    "episodes": 234,
    "seed": 0,
    "limit": None,
    "verify_iter": None,
    "target": 24,
    "resolution": 1200,
    "example": False,
    "cot": False,
    "n_candidates": 8,
}
SPLIT_INDEX = {name: i for i, name in enumerate(SPLITS)}


@dataclass(frozen=True)
class GPOptions:
    splits: tuple[str, ...]
    mode: str
    episodes: int
    seed: int
    limit: int | None
    verify_iter: int | None
    target: int
    resolution: int
    example: bool
    cot: bool
    n_candidates: int


def _int(options: dict[str, Any], key: str, minimum: int, allow_none: bool = False) -> int | None:
    value = options.get(key, DEFAULT_OPTIONS.get(key))
    if value is None or value == "":
        if allow_none:
            return None
        raise DataError(f"gp option {key!r} is required")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DataError(f"gp option {key!r}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise DataError(f"gp option {key!r}: must be >= {minimum}, got {number}")
    return number


def _bool(options: dict[str, Any], key: str) -> bool:
    value = options.get(key, DEFAULT_OPTIONS[key])
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise DataError(f"gp option {key!r}: expected true/false, got {value!r}")


def parse_options(options: dict[str, Any]) -> GPOptions:
    """Validate the suite options (strings from the CLI are accepted); errors name the option."""
    known = set(DEFAULT_OPTIONS) | {"data"}
    unknown = set(options) - known
    if unknown:
        raise DataError(f"gp options: unknown key(s) {sorted(unknown)}; known: {sorted(DEFAULT_OPTIONS)}")
    raw_split = options.get("split", DEFAULT_OPTIONS["split"])
    names = list(raw_split) if isinstance(raw_split, list | tuple) else str(raw_split).split(",")
    names = [n.strip() for n in names if n.strip()]
    splits = tuple(SPLITS) if names == ["all"] else tuple(dict.fromkeys(names))
    for name in splits:
        if name not in SPLITS:
            raise DataError(f"gp option 'split': unknown split {name!r}; known: {', '.join(SPLITS)} or all")
    if not splits:
        raise DataError("gp option 'split' is empty")
    mode = str(options.get("mode", DEFAULT_OPTIONS["mode"])).strip().lower()
    if mode not in MODES:
        raise DataError(f"gp option 'mode': expected one of {MODES}, got {mode!r}")
    return GPOptions(
        splits=splits,
        mode=mode,
        episodes=_int(options, "episodes", 1),
        seed=_int(options, "seed", 0),
        limit=_int(options, "limit", 1, allow_none=True),
        verify_iter=_int(options, "verify_iter", 1, allow_none=True),
        target=_int(options, "target", 1),
        resolution=_int(options, "resolution", 32),
        example=_bool(options, "example"),
        cot=_bool(options, "cot"),
        n_candidates=_int(options, "n_candidates", 1),
    )


def episode_seed(seed: int, split: str, index: int) -> int:
    """A well-mixed 32-bit seed for hand ``index`` of ``split`` (independent streams per split)."""
    return int(np.random.SeedSequence([seed, SPLIT_INDEX[split], index]).generate_state(1)[0])


def make_env(options: dict[str, Any]) -> GeneralPointsEnv:
    o = parse_options(options)
    return GeneralPointsEnv(mode=o.mode, split=o.splits[0], target=o.target, resolution=o.resolution,
                            n_candidates=o.n_candidates)


def make_prompter(options: dict[str, Any]) -> GPPrompter:
    o = parse_options(options)
    return GPPrompter(mode=o.mode, example=o.example, cot=o.cot)


def episodes(options: dict[str, Any]) -> list[EpisodeSpec]:
    """``episodes`` hands per split (at most ``limit``), ids ``<split>-<index>``, category = split."""
    o = parse_options(options)
    n = o.episodes if o.limit is None else min(o.episodes, o.limit)
    specs = []
    for split in o.splits:
        reset: dict[str, Any] = {"split": split}
        if o.verify_iter is not None:
            reset["verify_iter"] = o.verify_iter
        for i in range(n):
            specs.append(EpisodeSpec(episode_id=f"{split}-{i:04d}", category=split, reset_options=dict(reset),
                                     seed=episode_seed(o.seed, split, i)))
    return specs


def render_episode(episode: dict[str, Any], steps: list[dict[str, Any]], options: dict[str, Any],
                   asset_dir: Any) -> str:
    """Report fragment: the dealt table (a PNG in ``asset_dir``) and each answer's verdict."""
    from PIL import Image

    from spatialrl.envs.gp.card_images import render_table
    from spatialrl.envs.gp.cards import Card
    from spatialrl.io import atomic_write_bytes

    parts = []
    if episode.get("cards"):
        image = render_table([Card.parse(c) for c in episode["cards"]], 480)
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        name = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(episode["episode_id"])) + ".png"
        atomic_write_bytes(Path(asset_dir) / name, buffer.getvalue())
        parts.append(f'<img src="{name}" alt="cards {html.escape(" ".join(episode["cards"]))}" width="320">')
        parts.append(f"<p>cards {html.escape(str(episode.get('plain_cards')))} → numbers "
                     f"{html.escape(str(episode.get('numbers')))}; a solution: "
                     f"<code>{html.escape(str(episode.get('expert_formula')))}</code></p>")
    rows = "".join(
        f"<tr><td>{s.get('attempt')}</td><td>{html.escape(str(s.get('outcome')))}</td><td>{s.get('reward')}</td>"
        f"<td><code>{html.escape(str(s.get('formula')))}</code></td>"
        f"<td>{html.escape(str(s.get('verify_info')))}</td></tr>"
        for s in steps
    )
    parts.append("<table><thead><tr><th>attempt</th><th>outcome</th><th>reward</th><th>formula</th>"
                 f"<th>verifier</th></tr></thead><tbody>{rows}</tbody></table>")
    return "".join(parts)


SUITE = register_suite(
    TaskSuite(
        name="gp",
        description="GeneralPoints: make 24 from four cards (SFT Memorizes, RL Generalizes)",
        make_env=make_env,
        make_prompter=make_prompter,
        episodes=episodes,
        summarize=summarize,
        render_episode=render_episode,
        default_options={k: v for k, v in DEFAULT_OPTIONS.items() if v is not None},
        thought=gp_thought,
    )
)
