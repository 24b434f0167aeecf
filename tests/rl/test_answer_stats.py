"""The task suites' answer statistics (``TaskSuite.answer_stats``): V-IRL's share of answers in each action
vocabulary, on answers the generated V-IRL task really produces (the expert's, the random agent's)."""

from __future__ import annotations

import pytest

from spatialrl.envs.registry import get_suite
from spatialrl.train.rl_common import answer_metrics


@pytest.fixture(scope="module")
def virl_data(tmp_path_factory):
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset

    return write_dataset(tmp_path_factory.mktemp("virl") / "golden", golden_routes(), seed=0)


def expert_answers(suite, options: dict, split: str) -> tuple[list[str], list[str]]:
    """The expert's answers over whole episodes of ``split`` and the random agent's candidates of their
    first states."""
    opts = {**options, "split": split}
    env = suite.make_env(opts)
    answers, candidates = [], []
    for spec in suite.episodes(opts):
        _, info = env.reset(options=spec.reset_options)
        candidates.extend(info["candidate_responses"])
        done = False
        while not done:
            answers.append(info["expert_response"])
            _, _, terminated, truncated, info = env.step(info["expert_response"])
            done = terminated or truncated
    env.close()
    return answers, candidates


def test_virl_answers_by_vocabulary(virl_data):
    suite = get_suite("virl")
    options = {"data": str(virl_data), "mode": "l", "episodes": 3, "seed": 42}
    absolute, abs_candidates = expert_answers(suite, options, "in-dist")
    relative, rel_candidates = expert_answers(suite, options, "rule-ood")

    stats = suite.answer_stats(relative)
    assert stats["relative_share"] > 0 and stats["absolute_share"] == 0 and stats["invalid_share"] == 0
    assert stats["relative_share"] + stats["shared_share"] == pytest.approx(1.0)
    stats = suite.answer_stats(absolute)
    assert stats["absolute_share"] > 0 and stats["relative_share"] == 0 and stats["invalid_share"] == 0
    # one of each candidate list: forward() and stop() in both vocabularies, 4 relative and 8 absolute turns
    assert suite.answer_stats(rel_candidates[:6]) == {"relative_share": 4 / 6, "absolute_share": 0.0,
                                                      "shared_share": 2 / 6, "invalid_share": 0.0}
    assert suite.answer_stats(abs_candidates[:10])["absolute_share"] == pytest.approx(0.8)
    # a mix: an unreadable answer and a strict-JSON one (read by json.loads, as the verifier does)
    mixed = [relative[0], absolute[0], "no json at all", '{"action": "turn_direction(slightly left)"}']
    shares = suite.answer_stats(mixed)
    assert shares["invalid_share"] == 0.25 and sum(shares.values()) == pytest.approx(1.0)
    assert shares["relative_share"] >= 0.25


def test_answer_metrics_prefix_and_suites_without_the_hook(virl_data):
    virl = get_suite("virl")
    logged = answer_metrics(virl, ['{"action": "turn_direction(left)"}', '{"action": "forward()"}'])
    assert logged == {"rollout/answer_relative_share": 0.5, "rollout/answer_absolute_share": 0.0,
                      "rollout/answer_shared_share": 0.5, "rollout/answer_invalid_share": 0.0}
    assert answer_metrics(get_suite("tvr"), ["Action: forward"]) == {}  # TVR has one vocabulary: no hook
    assert answer_metrics(virl, []) == {}
