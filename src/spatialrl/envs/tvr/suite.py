"""The TVR task suite: how the generic eval runner, SFT data builder and RL loops meet TVR.

Options (``--data``, ``--split``, ``--set key=value``):

``data`` bench folder · ``split`` eval|sft|rl|diag_rotate|diag_move · ``memory`` va|ao|window ·
``cot`` · ``target_once`` · ``history_len`` (AO) · ``window`` (window memory) · ``width``/``height`` ·
``badges`` · ``cache_mb`` · ``distance`` euclidean|geodesic · ``max_steps_single``/``max_steps_multi`` ·
``limit`` (episodes, taken round-robin over categories so a small limit still covers all four) ·
``categories`` (list or comma-separated, e.g. ``single-easy,multi-hard``) · ``vector_env`` (default true:
the rollout core steps all slots through one ``TVRVectorEnv``, every frame of a turn in one batched render;
the episodes are the same as with one ``TVREnv`` per slot, tested; ``false`` goes back to one env per slot) ·
``env_workers`` (default 1: that vector env in this process; k > 1: a ``ShardedVectorEnv`` of k worker
processes, each with its own ``TVRVectorEnv`` of about n/k envs and its own GL context, rendering into one
shared observation array, so the host side of a step uses k cores; same episodes, tested).
``frames`` separate|joined (default separate, TVRBench's two images; ``joined``: one side-by-side image per
turn, in any memory mode without ``target_once``, a built-in-agent variant, ``prompts.py``).
``vector_env``, ``env_workers`` and ``frames`` are not among ``DEFAULT_OPTIONS`` so that runs made before them
resume unchanged (an option set explicitly is recorded in the run's ``run.json`` as any other).
"""

from __future__ import annotations

from typing import Any

from spatialrl.envs.registry import EpisodeSpec, TaskSuite, check_option_values, register_suite
from spatialrl.envs.tvr import metrics
from spatialrl.envs.tvr.episode import ACTION_RE
from spatialrl.envs.tvr.prompts import FRAME_LAYOUTS, MEMORY_MODES, TVRPrompter, check_frames
from spatialrl.envs.tvr.tasks import CATEGORIES, open_bench
from spatialrl.envs.tvr.thoughts import tvr_thought
from spatialrl.errors import DataError

DEFAULT_OPTIONS: dict[str, Any] = {
    "data": None,
    "split": "eval",
    "memory": "va",
    "cot": False,
    "target_once": False,
    "history_len": 5,
    "window": 4,
    "width": 640,
    "height": 360,
    "badges": True,
    "cache_mb": 512,
    "distance": "euclidean",
    "max_steps_single": 30,
    "max_steps_multi": 40,
    "limit": None,
    "categories": None,
    "expert_tie_break": "look_first",  # among equally optimal actions: look_first | canonical (oracle.py)
}
# Runtime choices that change no result and are not in DEFAULT_OPTIONS (a run's options stay as they were).
_RUNTIME = {"vector_env": True, "env_workers": 1}
# Options added after runs existed that do change what the model sees: their default applies when unset.
_LATER = {"frames": "separate"}
_KNOWN = set(DEFAULT_OPTIONS) | set(_RUNTIME) | set(_LATER)
_CHOICES = {"memory": MEMORY_MODES, "distance": ("euclidean", "geodesic"), "frames": FRAME_LAYOUTS}  # split: the bench says which it has
_MINIMUM = {"history_len": 0, "window": 1, "width": 16, "height": 16, "cache_mb": 0, "max_steps_single": 1,
            "max_steps_multi": 1, "env_workers": 1}


def _options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - _KNOWN
    if unknown:
        raise DataError(f"unknown TVR option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_KNOWN))}")
    check_option_values("tvr", options, {**DEFAULT_OPTIONS, **_RUNTIME, **_LATER}, choices=_CHOICES,
                        minimum=_MINIMUM)
    opts = {**DEFAULT_OPTIONS, **_RUNTIME, **_LATER, **options}
    try:
        check_frames(opts["frames"], opts["memory"], opts["target_once"])
    except ValueError as e:
        raise DataError(f"TVR option {e}") from None
    if not opts["data"]:
        raise DataError("TVR needs a bench folder: --data DIR (make one with `spatialrl tvr make-bench --out DIR`)")
    return opts


def _categories(value: Any) -> list[str] | None:
    if value in (None, "", []):
        return None
    cats = [c.strip() for c in value.split(",")] if isinstance(value, str) else [str(c) for c in value]
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        raise DataError(f"unknown TVR categories {bad}; expected some of {', '.join(CATEGORIES)}")
    return cats


def make_env(options: dict[str, Any]):
    from spatialrl.envs.tvr.env import TVREnv

    o = _options(options)
    return TVREnv(bench=o["data"], split=o["split"], width=o["width"], height=o["height"], badges=o["badges"],
                  cache_mb=o["cache_mb"], max_steps_single=o["max_steps_single"],
                  max_steps_multi=o["max_steps_multi"], distance=o["distance"],
                  expert_tie_break=o["expert_tie_break"])


def make_vector_env(options: dict[str, Any], n: int):
    """``n`` TVR envs in one ``TVRVectorEnv`` (the rollout core's batch path), or None with ``vector_env=false``.
    Autoreset is off (the core starts each slot's episode), buffers are the env's own (the core copies
    each slot's frames out) and the target image comes with resets only (the core keeps it per slot).
    With ``env_workers=k > 1``: a ``ShardedVectorEnv`` of ``min(k, n)`` near-equal shards, each such a
    ``TVRVectorEnv`` in its own process, rendering straight into the shared observation array."""
    import functools

    from spatialrl.envs.tvr.vector import TVRVectorEnv

    o = _options(options)
    if not o["vector_env"]:
        return None
    make = functools.partial(TVRVectorEnv, bench=o["data"], split=o["split"], width=o["width"], height=o["height"],
                             badges=o["badges"], cache_mb=o["cache_mb"], max_steps_single=o["max_steps_single"],
                             max_steps_multi=o["max_steps_multi"], distance=o["distance"],
                             expert_tie_break=o["expert_tie_break"], autoreset_mode="Disabled", copy=False,
                             step_target_image=False)
    k = min(o["env_workers"], n)
    if k <= 1:
        return make(n)
    from spatialrl.envs.sharded import ShardedVectorEnv, even_sizes

    return ShardedVectorEnv(make, even_sizes(n, k), copy=False)


def make_prompter(options: dict[str, Any]) -> TVRPrompter:
    o = {**DEFAULT_OPTIONS, **_LATER, **options}
    try:
        return TVRPrompter(memory=o["memory"], cot=bool(o["cot"]), target_once=bool(o["target_once"]),
                           history_len=int(o["history_len"]), window=int(o["window"]), frames=o["frames"])
    except ValueError as e:
        raise DataError(f"TVR options: {e}") from None


def episodes(options: dict[str, Any]) -> list[EpisodeSpec]:
    """One episode per task of the split (id = task_id, category = task category)."""
    o = _options(options)
    tasks = open_bench(o["data"]).tasks(o["split"])
    cats = _categories(o["categories"])
    if cats is not None:
        tasks = [t for t in tasks if t["category"] in cats]
    limit = o["limit"]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise DataError(f"TVR option limit must be an integer >= 0, got {limit!r}")
        by_cat: dict[str, list[dict[str, Any]]] = {}
        for t in tasks:
            by_cat.setdefault(t["category"], []).append(t)
        picked: list[dict[str, Any]] = []
        queues = [list(v) for _, v in sorted(by_cat.items())]
        while len(picked) < limit and any(queues):
            for q in queues:
                if q and len(picked) < limit:
                    picked.append(q.pop(0))
        order = {t["task_id"]: i for i, t in enumerate(tasks)}
        tasks = sorted(picked, key=lambda t: order[t["task_id"]])
    return [EpisodeSpec(episode_id=t["task_id"], category=t["category"], reset_options={"task_id": t["task_id"]})
            for t in tasks]


def render_episode(episode: dict[str, Any], steps: list[dict[str, Any]], options: dict[str, Any], asset_dir: Any) -> str:
    from spatialrl.envs.tvr.report import render_episode as _render

    return _render(episode, steps, options, asset_dir)


# The paper's human protocol: W/S/A/D move, Q/E rotate, R/F look, Space stops.
HUMAN_KEYS = {"MoveAhead": "w", "MoveBack": "s", "MoveLeft": "a", "MoveRight": "d", "RotateLeft": "q",
              "RotateRight": "e", "LookUp": "r", "LookDown": "f", "Stop": " "}


def human_view(obs: Any, info: dict[str, Any]) -> dict[str, Any]:
    """The play page: current view beside the target, the nine actions on their keys."""
    valid = info.get("valid_actions", [])
    return {
        "images": [{"label": "current view", "image": obs}, {"label": "target view", "image": info["target_image"]}],
        "texts": [{"label": "valid actions", "text": ", ".join(valid)}],
        "actions": [{"label": name, "response": f"Action: {name}", "key": key} for name, key in HUMAN_KEYS.items()],
    }


SUITE = register_suite(
    TaskSuite(
        name="tvr",
        description="Target Viewpoint Reproduction (TVRBench): match a target view, then Stop",
        make_env=make_env,
        make_prompter=make_prompter,
        episodes=episodes,
        summarize=metrics.summarize,
        render_episode=render_episode,
        human_view=human_view,
        default_options=dict(DEFAULT_OPTIONS),
        thought=tvr_thought,
        action_pattern=ACTION_RE.pattern,
        anchor_field="prev_pose",  # the pose before the action
        make_vector_env=make_vector_env,
    )
)
