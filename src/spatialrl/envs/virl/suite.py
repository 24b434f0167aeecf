"""The `virl` task suite: the three evaluation splits of "SFT Memorizes, RL Generalizes" (V-IRL).

Splits (``--split``, or a comma list, or ``all``):

- ``in-dist``: 48 episodes, absolute actions, routes drawn by ``random.choice`` from a sequence seeded
  once with 12 (the reference evaluator; every episode's heading and drops come from that sequence);
- ``rule-ood``: the same 48 draws with the relative action space;
- ``visual-ood``: the first 18 routes of ``visual_data`` in file order — the real ``VLN_mini`` has 18
  routes over 9 cities — absolute actions, headings from the seed-12 sequence. ``visual_data`` is
  required for this split (a visually different dataset; pass the ``data`` folder itself to evaluate
  on the training city on purpose): falling back to ``data`` silently would report in-distribution
  pixels as visual-OOD.

Options (``--set key=value``): ``data`` (dataset folder, required), ``visual_data``, ``split``, ``mode``
(``vl`` | ``l``), ``grid_size`` (2405 for parity; e.g. 448 for small models), ``rail_mode``
(``faithful`` | ``fixed`` | comma list of fixes), ``limit`` (episodes per split), ``episodes`` (count per
split instead of 48/18), ``verify_iter`` (2), ``seed`` (12), ``cache_mb``, ``cache_dir``,
``intersection_in_text`` (true: the reference prompt, whose current history line says "You observe an
intersection" at intersections; false, VL mode only: the vision-required variant, where that line is the
same at every point and the street-view grid alone tells intersection from street and which landmarks
are there). ``intersection_in_text`` is not among the defaults, so runs made before it existed resume
unchanged; absent means true.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from spatialrl.envs.registry import EpisodeSpec, TaskSuite, register_suite
from spatialrl.envs.virl.thoughts import virl_thought
from spatialrl.envs.virl.verify import _PATTERNS as _ANSWER_PATTERNS
from spatialrl.errors import DataError, SpatialRLError

SPLITS: dict[str, dict[str, Any]] = {
    "in-dist": {"absolute": True, "ordered": False, "n": 48},
    "rule-ood": {"absolute": False, "ordered": False, "n": 48},
    "visual-ood": {"absolute": True, "ordered": True, "n": 18},
}
DEFAULTS: dict[str, Any] = {
    "split": "in-dist", "mode": "vl", "grid_size": 2405, "rail_mode": "faithful", "verify_iter": 2, "seed": 12,
}
OPTION_KEYS = frozenset(DEFAULTS) | {"data", "visual_data", "limit", "episodes", "cache_mb", "cache_dir",
                                     "intersection_in_text"}


def _check(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - OPTION_KEYS)
    if unknown:
        raise SpatialRLError(f"virl: unknown option(s) {unknown}; known: {sorted(OPTION_KEYS)}")
    opts = {**DEFAULTS, **options}
    if not opts.get("data"):
        raise SpatialRLError("virl: a dataset folder is required (--data DIR, e.g. .../VIRL_routes/nyc_1k_routes)")
    if opts["mode"] not in ("vl", "l"):
        raise SpatialRLError(f"virl: mode must be 'vl' or 'l', got {opts['mode']!r}")
    shown = opts.get("intersection_in_text", True)
    if not isinstance(shown, bool):
        raise SpatialRLError(f"virl: option intersection_in_text must be true or false, got {shown!r}")
    if not shown and opts["mode"] != "vl":
        raise SpatialRLError("virl: intersection_in_text=false (the vision-required variant) needs mode=vl: "
                             "a text-only agent would have nothing left to tell an intersection by")
    from spatialrl.envs.virl.rail import parse_rail_mode

    try:
        parse_rail_mode(opts["rail_mode"])
    except ValueError as e:
        raise SpatialRLError(f"virl: {e}") from None
    return opts


def split_names(split: str) -> list[str]:
    names = list(SPLITS) if split == "all" else [s.strip() for s in str(split).split(",") if s.strip()]
    bad = [s for s in names if s not in SPLITS]
    if bad or not names:
        raise SpatialRLError(f"virl: unknown split(s) {bad or split!r}; choose from {list(SPLITS)} or 'all'")
    return names


VISUAL_DATA_HELP = (
    "virl: the visual-ood split needs a second, visually different dataset: --set visual_data=DIR "
    "(the real data: .../VIRL_routes/VLN_mini; or generate a second city, e.g. "
    "`spatialrl virl make-city --style hillside --routes 18 --seed 1 --out data/hillside`). "
    "To run visual-ood on the training data on purpose, pass --set visual_data=<the --data folder>."
)


def make_env(options: dict[str, Any]) -> Any:
    import gymnasium as gym

    from spatialrl.envs.virl.env import ENV_ID

    opts = _check(options)
    try:
        return gym.make(
            ENV_ID,
            data=opts["data"],
            mode=opts["mode"],
            grid_size=int(opts["grid_size"]),
            rail_mode=opts["rail_mode"],
            intersection_in_text=opts.get("intersection_in_text", True),
            verify_iter=int(opts["verify_iter"]),
            cache_mb=float(opts.get("cache_mb") or 1024),
            cache_dir=opts.get("cache_dir"),
        )
    except DataError:
        raise
    except ValueError as e:
        raise SpatialRLError(f"virl: {e}") from None


def make_prompter(options: dict[str, Any]) -> Any:
    from spatialrl.envs.virl.prompts import VirlPrompter

    return VirlPrompter(vision=_check(options)["mode"] == "vl")


def episodes(options: dict[str, Any]) -> list[EpisodeSpec]:
    """The episodes of the requested split(s); loads and validates every dataset first, so bad data
    fails here with one clear error, before any model runs."""
    from spatialrl.envs.virl.validate import load_dataset

    opts = _check(options)
    names = split_names(opts["split"])
    if "visual-ood" in names and not opts.get("visual_data"):
        raise SpatialRLError(VISUAL_DATA_HELP)
    specs: list[EpisodeSpec] = []
    for split in names:
        cfg = SPLITS[split]
        data = opts["visual_data"] if split == "visual-ood" else opts["data"]
        dataset = load_dataset(data, images=opts["mode"] == "vl", progress=True)
        n = int(opts.get("episodes") or cfg["n"])
        if cfg["ordered"]:
            n = min(n, len(dataset.routes))
        if opts.get("limit") is not None:
            n = min(n, int(opts["limit"]))
        for k in range(n):
            specs.append(
                EpisodeSpec(
                    episode_id=f"{split}-{k:03d}",
                    category=split,
                    reset_options={
                        "stream": {"seed": int(opts["seed"]), "index": k, "ordered": cfg["ordered"]},
                        "absolute_action": cfg["absolute"],
                        "split": split,
                        "data": str(Path(data).expanduser()),
                    },
                )
            )
    return specs


def answer_stats(answers: list[str]) -> dict[str, float]:
    """Shares of answers by the action vocabulary their ``action`` field uses (read as the verifier reads
    it): ``relative`` (turn_direction(left | right | slightly left | slightly right): the rule-OOD
    vocabulary), ``absolute`` (turn_direction(<compass word>): the in-dist one), ``shared`` (forward() and
    stop(), in both) and ``invalid`` (anything else, or no action field). They sum to 1."""
    from spatialrl.envs.virl.prompts import ABSOLUTE_ACTIONS, RELATIVE_ACTIONS
    from spatialrl.envs.virl.verify import read_field

    shared = set(ABSOLUTE_ACTIONS) & set(RELATIVE_ACTIONS)
    kinds = {**dict.fromkeys(RELATIVE_ACTIONS, "relative"), **dict.fromkeys(ABSOLUTE_ACTIONS, "absolute"),
             **dict.fromkeys(shared, "shared")}
    counts = dict.fromkeys(("relative", "absolute", "shared", "invalid"), 0)
    for text in answers:
        counts[kinds.get(read_field(text, "action"), "invalid")] += 1
    return {f"{k}_share": v / max(1, len(answers)) for k, v in counts.items()}


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    from spatialrl.envs.virl.metrics import summarize as _summarize

    return _summarize(records)


def after_run(run_dir: Any, options: dict[str, Any]) -> None:
    from spatialrl.envs.virl.metrics import write_reference_logs

    write_reference_logs(run_dir, mode=str(options.get("mode", "vl")))


def render_episode(episode: dict[str, Any], steps: list[dict[str, Any]], options: dict[str, Any],
                   asset_dir: Any, tile_px: int = 448) -> str:
    """Per step: the grid the model saw (re-rendered small from the dataset), its answer, the verifier's
    message. Images go to ``asset_dir``; ``src`` is relative to it (the report prefixes the folder)."""
    import cv2

    from spatialrl.envs.virl.pixels import GridRenderer
    from spatialrl.envs.virl.rail import parse_rail_mode
    from spatialrl.envs.virl.validate import load_dataset

    renderer = None
    try:
        dataset = load_dataset(episode.get("data") or options["data"], images=True)
        fixes = parse_rail_mode(episode.get("rail_mode") or options.get("rail_mode"))
        renderer = GridRenderer(dataset, tile_px, fixes.grid_order, cache=None)
    except Exception:  # the images are optional in a report (L mode, moved data)
        renderer = None
    esc = html.escape
    first = steps[0] if steps else {}
    parts = [
        f"<p>route {esc(str(episode.get('route_idx')))} · start heading {esc(str(episode.get('start_heading')))}"
        f" · rail {esc(str(episode.get('rail_len')))} points · per-step accuracy "
        f"{float(episode.get('per_step_accuracy') or 0):.2f}</p>",
        f"<pre>{esc(str(first.get('global_instruction', '')))}</pre>",
        "<table><thead><tr><th>t</th><th>view</th><th>expected</th><th>model output</th><th>reward</th>"
        "<th>verifier</th></tr></thead><tbody>",
    ]
    asset = Path(asset_dir)
    for s in sorted(steps, key=lambda s: s["t"]):
        img = ""
        view = s.get("view") or {}
        if renderer is not None and view.get("pano_id"):
            name = f"{s['episode_id']}-{s['t']:03d}.jpg".replace("/", "_")
            try:
                grid = renderer.render(view["pano_id"], float(view["heading"]))
                asset.mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(asset / name), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85])
                img = f'<img src="{esc(name)}" width="224" alt="t={s["t"]}">'
            except Exception:
                img = ""
        parts.append(
            f"<tr><td>{s['t']}</td><td>{img}</td><td>{esc(str(s.get('expected_action', '')))}<br>"
            f"<small>{esc(str(s.get('expected_instruction', '')))}</small></td>"
            f"<td><pre>{esc(str(s.get('response', '')))}</pre></td><td>{s.get('reward')}</td>"
            f"<td><small>{esc(str(s.get('Verify Info', '')))}</small></td></tr>"
        )
    parts.append("</tbody></table>")
    return "".join(parts)


def human_view(obs: Any, info: dict[str, Any]) -> dict[str, Any]:
    """The play page: the 2×2 street-view grid (VL), the instructions and history, one button per action.

    A button sends the expert's answer format with the chosen action; its "current observation" field is
    the oracle's, so a human is judged on the action, as the paper's human protocol does.
    """
    import re

    texts = [{"label": "instructions", "text": str(info.get("global_instruction", ""))},
             {"label": "history", "text": str(info.get("obs_act_seq", ""))}]
    if info.get("Verify Info"):
        texts.append({"label": "last answer", "text": str(info["Verify Info"])})
    if not isinstance(obs, str):
        images = [{"label": "street views (2×2 grid of the four directions)", "image": obs}]
    else:
        images = []
        texts.insert(0, {"label": "observation", "text": obs})
    actions = []
    for i, response in enumerate(info.get("candidate_responses", [])):
        found = re.search(r'"action": "(.*?)"', response)  # the expert format is JSON-like, not strict JSON
        label = found.group(1) if found else response
        actions.append({"label": label, "response": response, "key": "1234567890"[i] if i < 10 else None})
    return {"images": images, "texts": texts, "actions": actions}


SUITE = register_suite(
    TaskSuite(
        name="virl",
        description="V-IRL street-view route following (SFT Memorizes, RL Generalizes)",
        make_env=make_env,
        make_prompter=make_prompter,
        episodes=episodes,
        summarize=summarize,
        render_episode=render_episode,
        after_run=after_run,
        human_view=human_view,
        default_options=dict(DEFAULTS),
        thread_safe_envs=True,  # per-env state; the shared grid cache takes a lock
        thought=virl_thought,
        action_pattern=_ANSWER_PATTERNS["action"].pattern,
        answer_stats=answer_stats,
    )
)
