"""The suite: options, episode lists, metrics on real runs, report fragments, and `spatialrl eval --task gp`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spatialrl.agents.base import Generation, SamplingParams
from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.envs.gp.answer import format_answer
from spatialrl.envs.registry import get_suite
from spatialrl.errors import DataError
from spatialrl.rollout.runner import run_episodes

SUITE = get_suite("gp")
SMALL = {"resolution": 96, "episodes": 6}


def test_episode_list_is_deterministic_and_per_split():
    specs = SUITE.episodes({**SMALL, "split": "all", "seed": 3})
    assert len(specs) == 24 and specs == SUITE.episodes({**SMALL, "split": "all", "seed": 3})
    assert [s.category for s in specs[::6]] == ["in-dist", "rule-ood", "visual-ood", "recognition"]
    assert specs[0].episode_id == "in-dist-0000" and specs[0].reset_options == {"split": "in-dist"}
    assert len({s.seed for s in specs}) == 24
    assert {s.seed for s in SUITE.episodes({**SMALL, "seed": 4})}.isdisjoint({s.seed for s in specs})
    limited = SUITE.episodes({"split": "rule-ood,visual-ood", "limit": 2, "verify_iter": "3"})
    assert [s.episode_id for s in limited] == ["rule-ood-0000", "rule-ood-0001", "visual-ood-0000", "visual-ood-0001"]
    assert limited[0].reset_options == {"split": "rule-ood", "verify_iter": 3}
    assert len(SUITE.episodes({})) == 234  # the reference's NUM_TRAJ


@pytest.mark.parametrize(
    ("options", "field"),
    [({"split": "test"}, "split"), ({"mode": "image"}, "mode"), ({"episodes": "many"}, "episodes"),
     ({"episodes": 0}, "episodes"), ({"example": "maybe"}, "example"), ({"colour": "red"}, "unknown")],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(DataError, match=field):
        SUITE.episodes(options)


class WrongCardsFirst:
    """A real policy: names a wrong card on its first answer of an episode, then answers correctly."""

    name = "wrong-cards-first"

    def generate(self, conversations, sampling, infos=None):
        out = []
        for conv, info in zip(conversations, infos, strict=True):
            if len(conv) == 1:
                cards = ["K" if c != "K" else "Q" for c in info["plain_cards"][:1]] + info["plain_cards"][1:]
                out.append(Generation(text=format_answer(cards, info["numbers"], "1+2=3")))
            else:
                out.append(Generation(text=info["expert_response"]))
        return out


def test_metrics_on_real_runs(tmp_path):
    options = {**SMALL, "split": "all"}
    specs = SUITE.episodes(options)
    expert = SUITE.summarize(run_episodes(SUITE, options, ExpertPolicy(), specs, progress=False).episodes)
    assert set(expert) == {"overall", "in-dist", "rule-ood", "visual-ood", "recognition"}
    assert expert["overall"]["success_rate"] == 1.0 and expert["overall"]["rate/CORRECT_SOLUTION"] == 1.0
    assert expert["overall"]["steps"] == expert["overall"]["episodes"] == 24

    result = run_episodes(SUITE, options, RandomPolicy(seed=1), specs, progress=False)
    rnd = SUITE.summarize(result.episodes)
    for row in rnd.values():
        assert sum(v for k, v in row.items() if k.startswith("rate/")) == pytest.approx(1.0)
        assert row["recognition_accuracy"] == 1.0  # candidates always name the right cards
    wins = [e for e in result.episodes if e["success"]]
    assert rnd["overall"]["success_rate"] == pytest.approx(len(wins) / 24)
    assert rnd["recognition"]["mean_attempts"] == 1.0
    assert rnd["overall"]["steps"] == result.env_steps

    run = run_episodes(SUITE, {**options, "split": "in-dist"}, WrongCardsFirst(), specs[:6], progress=False)
    m = SUITE.summarize(run.episodes)["in-dist"]
    assert m["success_rate"] == 1.0 and m["recognition_accuracy"] == 0.5 and m["first_recognition_accuracy"] == 0.0
    assert m["rate/INCORRECT_VISION"] == 0.5 and m["mean_return"] == pytest.approx(3.5)

    l_run = run_episodes(SUITE, {**options, "split": "in-dist", "mode": "l"}, WrongCardsFirst(), specs[:6],
                         progress=False)
    m = SUITE.summarize(l_run.episodes)["in-dist"]
    assert m["rate/INCORRECT_VISION"] == 0.0 and m["rate/INCORRECT_NUMBER"] == 0.5  # L: no vision check
    assert m["recognition_accuracy"] == 0.5  # but the copy error is still measured


def test_policy_errors_count_as_failures():
    records = [
        {"episode_id": "in-dist-0000", "category": "in-dist", "agent": "x", "n_steps": 0, "return": 0.0,
         "response_tokens": 0, "error": "server down", "success": False},
    ]
    m = SUITE.summarize(records)
    assert m["overall"]["success_rate"] == 0.0 and m["overall"]["errors"] == 1.0 and m["overall"]["steps"] == 0


def test_render_episode_writes_the_table(tmp_path):
    options = {**SMALL, "split": "in-dist"}
    out = tmp_path / "run"
    run_episodes(SUITE, options, RandomPolicy(seed=0), SUITE.episodes(options)[:1], out_dir=out, progress=False)
    episode = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps and all("outcome" in s and "verify_info" in s for s in steps)
    html = SUITE.render_episode(episode, steps, options, tmp_path)
    assert 'src="in-dist-0000.png"' in html and (tmp_path / "in-dist-0000.png").stat().st_size > 500
    assert html.count("<tr>") == len(steps) + 1


def test_eval_cli_end_to_end(tmp_path):
    from spatialrl.cli import app

    out = tmp_path / "gp-expert"
    args = ["eval", "--task", "gp", "--agent", "expert", "--split", "in-dist,rule-ood", "--out", str(out),
            "--set", "episodes=3", "--set", "resolution=128", "--batch-size", "4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["success_rate"] == 1.0 and metrics["rule-ood"]["episodes"] == 3
    assert (out / "report.html").exists() and any((out / "assets").rglob("*.png"))
    again = CliRunner().invoke(app, args)  # resume: nothing left to do, same metrics
    assert again.exit_code == 0 and json.loads((out / "metrics.json").read_text()) == metrics
    assert SamplingParams().greedy
