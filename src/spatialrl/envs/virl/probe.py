"""V-IRL states where the prompt text cannot decide the answer, for the image-sensitivity probe.

A rail point is a ``forward`` point or the end of its segment (an intersection, or the destination).
How many forward points a segment keeps is drawn at random (each of the segment's interpolated
candidates survives with probability 1 − ``drop_rate``), so after ``k`` forward steps along a segment
the next point may be another forward point or the segment's end. The prompt tells them apart only if
its text says so: the reference's VL prompt writes "You observe an intersection" at intersections but
nothing at the destination, so there the text cannot decide *forward vs stop* on the last segment; the
vision-required variant (``intersection_in_text=false``) writes nothing at intersections either, so
*forward vs turn* cannot be decided on any segment.

A probe state is a step of an expert episode (the conversation exactly as ``spatialrl eval`` builds it)
where the other kind of point was possible — the same history with one more forward point, or with the
segment ending here — and where the prompt would have been byte-identical (checked by building that
prompt, not assumed). It carries the two answers (the expert's here, first; the expert's answer had the
point been the other kind) and a contrast grid: the grid of a step of the same segment, same episode,
whose expert answer is that other answer (same heading, another position).

No models here: :mod:`spatialrl.eval.image_probe` scores the states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spatialrl.conversation import Conversation
from spatialrl.errors import SpatialRLError


@dataclass(frozen=True)
class ProbeState:
    conversation: Conversation  # one user turn: the grid, then the prompt text
    answers: tuple[str, str]  # (the expert's answer here, the expert's answer at the other kind of point)
    contrast_image: np.ndarray  # a grid of this segment where answers[1] is the expert's answer
    kind: str  # "<kind here>|<other kind>", e.g. "forward|destination", "intersection|forward"
    episode_id: str
    step: int


@dataclass(frozen=True)
class FoundState:
    """A probe state before its grids are rendered: a search may look at many more states than it keeps,
    and a full-size grid is 17 MB."""

    conversation: Conversation  # the prompter's, its grid part left empty
    own_view: tuple[str, float]  # (pano_id, heading) of the grid the agent sees here
    contrast_view: tuple[str, float]
    answers: tuple[str, str]
    kind: str
    episode_id: str
    step: int


def with_grid(conversation: Conversation, image: np.ndarray | None) -> Conversation:
    """The conversation with the last user turn's (only) grid image replaced by ``image``."""
    out = [dict(m) for m in conversation]
    last = out[-1]
    slots = [k for k, part in enumerate(last["content"]) if part["type"] == "image"]
    if len(slots) != 1:
        raise SpatialRLError(f"virl probe state: expected one grid image in the last user turn, found {len(slots)}")
    content = list(last["content"])
    content[slots[0]] = {"type": "image", "image": image}
    out[-1] = {**last, "content": content}
    return out


def _text(conversation: Conversation) -> str:
    return "".join(p["text"] for p in conversation[-1]["content"] if p["type"] == "text")


def _segments(rail: Any) -> list[int]:
    """Per rail point, the segment it lies on: 0 for the start, then 1, 2, ...; a segment's forward points
    and its end (intersection or destination) share its number."""
    seg, s = [0], 1
    for p in rail.points[1:]:
        seg.append(s)
        s += p.kind != "forward"
    return seg


def find_states(env: Any, prompter: Any, spec: Any) -> list[FoundState]:
    """Play ``spec`` with the expert through ``env`` (the unwrapped :class:`VirlEnv`) and ``prompter``;
    return its steps where the text cannot decide (module docstring), grids not rendered."""
    from spatialrl.envs.virl.prompts import build_prompt, obs_act_sequence
    from spatialrl.envs.virl.rail import MIN_SEGMENT_M, route_geometry

    if not env.vision:
        raise SpatialRLError("virl probe: the image-sensitivity probe needs mode=vl (there is no grid in mode=l)")
    obs, info = env.reset(options=spec.reset_options)
    prompter.reset(obs, info)
    rail = env.rail
    # per rail point: (the prompter's conversation without its grid, the grid's view, the expert's answer)
    steps: list[tuple[Conversation, tuple[str, float], str]] = []
    while True:
        view = env.view
        steps.append((with_grid(prompter.messages(), None), (view["pano_id"], float(view["heading"])),
                      info["expert_response"]))
        answer = info["expert_response"]
        obs, _, terminated, truncated, info = env.step(answer)
        if terminated or truncated:
            break
        prompter.update(answer, obs, info)
    if len(steps) != len(rail.points):
        raise SpatialRLError(f"virl probe: the expert left route {rail.route_index} after {len(steps)} of "
                             f"{len(rail.points)} points ({info.get('Verify Info')})")
    geometry = route_geometry(env.dataset, rail.route_index, env.straight_line_length)
    segment = _segments(rail)
    ends = {segment[i]: i for i, p in enumerate(rail.points) if i > 0 and p.kind != "forward"}
    found = []
    for t in range(1, len(rail.points)):
        point, s = rail.points[t], segment[t]
        forwards = [i for i in range(1, t) if segment[i] == s and rail.points[i].kind == "forward"]
        if point.kind == "forward":
            other = ends[s]
        else:
            seg = geometry.segments[s - 1]
            room = sum(c is not None for c in seg.candidates) if seg.distance_m > MIN_SEGMENT_M else 0
            if not forwards or room < len(forwards) + 1:
                continue  # no forward grid of this segment to swap in, or no room for one more forward point
            other = forwards[-1]  # the nearest forward point: the same heading, a few metres back
        # the prompt had point t been the other kind: the same history, the other current observation
        observations = [p.oracle_observation for p in rail.points[:t]] + [rail.points[other].oracle_observation]
        actions = [p.gt_action for p in rail.points[:t]]
        other_text = build_prompt(rail.global_instruction,
                                  obs_act_sequence(observations, actions, env.vision, env.intersection_in_text),
                                  rail.absolute_action, env.vision)
        conversation, own_view, answer = steps[t]
        if other_text != _text(conversation):
            continue  # the text tells the two kinds apart (the reference's intersection line)
        found.append(FoundState(conversation=conversation, own_view=own_view, contrast_view=steps[other][1],
                                answers=(answer, steps[other][2]), kind=f"{point.kind}|{rail.points[other].kind}",
                                episode_id=spec.episode_id, step=t))
    return found


def materialize(env: Any, found: FoundState) -> ProbeState:
    """Render a found state's two grids (the very call the env makes for its observation) and put its own
    grid back into its conversation."""
    own, contrast = (env.renderer.render(*view).copy() for view in (found.own_view, found.contrast_view))
    return ProbeState(conversation=with_grid(found.conversation, own), answers=found.answers, contrast_image=contrast, kind=found.kind,
                      episode_id=found.episode_id, step=found.step)


def episode_states(env: Any, prompter: Any, spec: Any) -> list[ProbeState]:
    """:func:`find_states` with the grids rendered."""
    return [materialize(env, f) for f in find_states(env, prompter, spec)]


def probe_states(options: dict[str, Any], n: int, seed: int = 0, max_episodes: int | None = None) -> list[ProbeState]:
    """Up to ``n`` states of the suite's episodes for ``options`` (split, data, grid_size,
    ``intersection_in_text``, ...), a seeded sample of those found in the first episodes that give at
    least ``4n`` (all of them when ``max_episodes`` is reached first). Same options and seed, same states."""
    from spatialrl.envs.virl.suite import SUITE

    opts = {**SUITE.default_options, **options}
    if opts.get("mode", "vl") != "vl":
        raise SpatialRLError("virl probe: the image-sensitivity probe needs mode=vl (there is no grid in mode=l)")
    specs = SUITE.episodes(opts)
    if max_episodes is not None:
        specs = specs[:max_episodes]
    env = SUITE.make_env(opts).unwrapped
    found: list[FoundState] = []
    for spec in specs:
        found += find_states(env, SUITE.make_prompter(opts), spec)
        if len(found) >= 4 * n:
            break
    keep = sorted(np.random.default_rng(seed).permutation(len(found))[:n].tolist())
    states = [materialize(env, found[i]) for i in keep]
    env.close()
    return states
