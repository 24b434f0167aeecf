"""The V-IRL probe states (issue 19): steps where the prompt text cannot decide the answer."""

from __future__ import annotations

import numpy as np

from spatialrl.envs.registry import EpisodeSpec
from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.probe import episode_states, probe_states, with_grid
from spatialrl.envs.virl.prompts import VirlPrompter
from tests.virl.test_vision_variant import (
    AT_INTERSECTION,
    HEADING,
    INTERSECTION_ANSWER,
    ON_STREET,
    ROUTE,
    STEP,
    STREET_ANSWER,
    _play,
)

SPEC = EpisodeSpec(episode_id="route-1", category="in-dist",
                   reset_options={"route_idx": ROUTE, "start_heading": HEADING})


def _states(data, in_text: bool):
    env = VirlEnv(data, grid_size=112, intersection_in_text=in_text, cache_mb=0, seed=AT_INTERSECTION)
    return {s.step: s for s in episode_states(env, VirlPrompter(vision=True), SPEC)}


def test_an_intersection_is_a_probe_state_only_in_the_variant(generated_city):
    variant, reference = _states(generated_city, False), _states(generated_city, True)
    state = variant[STEP]
    assert state.kind == "intersection|forward" and state.answers == (INTERSECTION_ANSWER, STREET_ANSWER)
    # the claim checked independently: another rail of the same route has a forward point at this step
    # and its prompt is this very text
    street_text, street_grid, street_answer, kind = _play(generated_city, ON_STREET, in_text=False)
    assert kind == "forward" and street_answer == state.answers[1]
    assert state.conversation[-1]["content"][1]["text"] == street_text
    # the grids are re-rendered after the search: the very pixels the agent saw there
    _, own_grid, _, _ = _play(generated_city, AT_INTERSECTION, in_text=False)
    assert np.array_equal(state.conversation[-1]["content"][0]["image"], own_grid)
    # the contrast grid is the forward point just before, same heading; the state's own grid is not it
    own = state.conversation[-1]["content"][0]["image"]
    assert np.abs(own.astype(int) - state.contrast_image.astype(int)).mean() > 1
    assert STEP not in reference  # the reference text says "You observe an intersection" there
    assert {s.kind for s in reference.values()} <= {"forward|destination", "destination|forward"}
    assert {s.kind for s in variant.values()} >= {"forward|intersection", "intersection|forward"}


def test_with_grid_swaps_only_the_grid(generated_city):
    state = next(iter(_states(generated_city, False).values()))
    swapped = with_grid(state.conversation, state.contrast_image)
    assert swapped[-1]["content"][0]["image"] is state.contrast_image
    assert swapped[-1]["content"][1] == state.conversation[-1]["content"][1]
    assert state.conversation[-1]["content"][0]["image"] is not state.contrast_image  # the state is untouched


def test_probe_states_are_deterministic_by_seed(generated_city):
    opts = {"data": str(generated_city), "grid_size": 112, "intersection_in_text": False, "episodes": 6}
    a, b = probe_states(opts, 5, seed=1), probe_states(opts, 5, seed=1)
    assert len(a) == 5 and [(s.episode_id, s.step) for s in a] == [(s.episode_id, s.step) for s in b]
    assert [(s.episode_id, s.step) for s in probe_states(opts, 5, seed=2)] != [(s.episode_id, s.step) for s in a]
