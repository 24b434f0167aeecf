"""Issue 23, faults 3, 4 and 6 on the counting task: errored episodes are counted apart and retried,
episodes are seeded per episode (any batch size, any kill point), torn step records are redone."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from spatialrl.agents.base import Generation, SamplingParams
from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.cli import app
from spatialrl.eval.evaluate import evaluate
from spatialrl.io import read_jsonl
from spatialrl.rollout.runner import run_episodes
from tests.agents.openai_server import FaultyServer


class FlakyPolicy:
    """The expert's answers, except that it cannot answer once the counter reaches 2 (targets 2 and 3 error)."""

    name = "flaky"

    def generate(self, conversations, sampling, infos=None):
        return [Generation(text="", error="server error 500 after 3 retries") if i["record"]["n"] == 2
                else Generation(text=i["expert_response"]) for i in infos]


# ------------------------------------------------------------------------------------ fault 3: errors
def test_errored_episodes_are_counted_apart_and_shown(tmp_path, count_suite):
    out = tmp_path / "run"
    result, metrics = evaluate("count", "flaky", {"n": 6}, out, policy=FlakyPolicy(), batch_size=3, progress=False)
    # ep2 (even) and ep3 (odd) reach n=2 and error; the four others are solved
    assert {r["episode_id"] for r in result.errors} == {"ep2", "ep3"}
    assert metrics["overall"]["errors"] == 2
    assert metrics["even"]["errors"] == 1 and metrics["odd"]["errors"] == 1
    assert metrics["overall"]["success_rate"] == 1.0  # errored episodes are not failures of the agent
    assert metrics["overall"]["episodes"] == 4
    assert metrics["overall"]["error_messages"][0] == "ep2: server error 500 after 3 retries"
    assert json.loads((out / "metrics.json").read_text()) == metrics

    from spatialrl.eval.report import write_report

    md, html = write_report([out], tmp_path / "rep")
    text = md.read_text()
    assert "**Errors (flaky):** 2 episode(s) ended with an error" in text and "per category: even 1, odd 1" in text
    assert "ep2: server error 500" in text and "ep2: server error 500" in html.read_text()


def test_errored_episodes_are_retried_on_rerun(tmp_path, count_suite):
    out = tmp_path / "run"
    evaluate("count", "flaky", {"n": 6}, out, policy=FlakyPolicy(), progress=False)
    kept, _ = evaluate("count", "flaky", {"n": 6}, out, policy=FlakyPolicy(), retry_errors=False, progress=False)
    assert kept.new_episodes == 0 and len(kept.errors) == 2
    # the server is back: a plain re-run retries exactly the errored episodes
    again, metrics = evaluate("count", "flaky", {"n": 6}, out, policy=ExpertPolicy(), progress=False)
    assert again.new_episodes == 2 and again.retried_errors == 2 and not again.errors
    assert metrics["overall"]["errors"] == 0 and metrics["overall"]["success_rate"] == 1.0
    records = list(read_jsonl(out / "episodes.jsonl"))
    assert sorted(r["episode_id"] for r in records) == [f"ep{i}" for i in range(6)]
    steps = list(read_jsonl(out / "steps.jsonl"))
    assert len(steps) == sum(r["n_steps"] for r in records)  # the errored attempts' steps are gone


def test_cli_exits_nonzero_when_every_episode_errored(tmp_path, count_suite):
    out = tmp_path / "run"
    with FaultyServer(always="[400]") as server:
        res = CliRunner().invoke(app, ["eval", "--task", "count", "--agent", f"openai:m@{server.url}",
                                       "--set", "n=3", "--out", str(out), "--no-report"])
    assert res.exit_code != 0, res.output
    assert "error:" in res.output and "all 3 episodes ended with an error" in res.output
    assert "(ep0)" in res.output and "400" in res.output
    assert json.loads((out / "metrics.json").read_text())["overall"]["errors"] == 3


# ---------------------------------------------------------------------------- fault 4: per-episode seeds
def _random_run(count_suite, batch_size, out_dir=None, episodes=None):
    eps = episodes or count_suite.episodes({"n": 12})
    res = run_episodes(count_suite, {}, RandomPolicy(5), eps, batch_size=batch_size, out_dir=out_dir,
                       sampling=SamplingParams(seed=5), progress=False)
    return res


def _trajectories(out_dir):
    steps = list(read_jsonl(out_dir / "steps.jsonl"))
    return sorted((s["episode_id"], s["t"], s["response"]) for s in steps)


def test_random_agent_episodes_do_not_depend_on_batch_size(tmp_path, count_suite):
    runs = {b: _random_run(count_suite, b, tmp_path / f"b{b}") for b in (1, 3, 8)}
    assert _trajectories(tmp_path / "b1") == _trajectories(tmp_path / "b3") == _trajectories(tmp_path / "b8")
    assert 0 < sum(r["success"] for r in runs[1].episodes) < 12  # really random


def test_random_agent_resume_from_any_kill_point_is_identical(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 12})
    _random_run(count_suite, 4, tmp_path / "whole", eps)
    for cut in (1, 5, 9):
        d = tmp_path / f"cut{cut}"
        _random_run(count_suite, 4, d, eps[:cut])  # "killed" after `cut` episodes
        with open(d / "steps.jsonl", "a") as f:  # and mid-way through the next one
            f.write(json.dumps({"episode_id": eps[cut].episode_id, "t": 0, "response": "+1"}) + "\n")
        _random_run(count_suite, 3, d, eps)
        assert _trajectories(d) == _trajectories(tmp_path / "whole")


def test_sampled_model_decoding_does_not_depend_on_batch_size(tmp_path, count_suite):
    from spatialrl.agents.loader import load_policy

    policy = load_policy("builtin:tiny-random", device="cpu")
    eps = count_suite.episodes({"n": 3})
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)
    texts = {}
    for b in (1, 3):
        run_episodes(count_suite, {}, policy, eps, batch_size=b, sampling=sampling, out_dir=tmp_path / f"b{b}",
                     max_turns=2, progress=False)
        texts[b] = _trajectories(tmp_path / f"b{b}")
    assert texts[1] == texts[3]
    assert len({r for _, _, r in texts[1]}) > 1  # sampled, not one fixed answer


# ---------------------------------------------------------------------------- fault 6: torn steps.jsonl
def test_torn_last_step_line_reruns_that_episode(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 6})
    run_episodes(count_suite, {}, ExpertPolicy(), eps, batch_size=2, out_dir=tmp_path, progress=False)
    steps_path = tmp_path / "steps.jsonl"
    whole = steps_path.read_text()
    last = json.loads(whole.splitlines()[-1])["episode_id"]
    steps_path.write_text(whole[: len(whole) - 7])  # the last step line is torn
    res = run_episodes(count_suite, {}, ExpertPolicy(), eps, batch_size=2, out_dir=tmp_path, progress=False)
    assert res.new_episodes == 1 and res.redone_incomplete == 1
    assert [r["episode_id"] for r in res.episodes if r["episode_id"] == last]
    assert steps_path.read_text().count("\n") == whole.count("\n")
    records = list(read_jsonl(tmp_path / "episodes.jsonl"))
    steps = list(read_jsonl(steps_path))
    for r in records:
        assert sorted(s["t"] for s in steps if s["episode_id"] == r["episode_id"]) == list(range(r["n_steps"]))


def test_missing_step_line_in_the_middle_reruns_that_episode(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 4})
    run_episodes(count_suite, {}, ExpertPolicy(), eps, batch_size=4, out_dir=tmp_path, progress=False)
    lines = (tmp_path / "steps.jsonl").read_text().splitlines(keepends=True)
    victim = next(i for i, line in enumerate(lines) if json.loads(line)["episode_id"] == "ep3")
    (tmp_path / "steps.jsonl").write_text("".join(lines[:victim] + lines[victim + 1 :]))
    res = run_episodes(count_suite, {}, ExpertPolicy(), eps, batch_size=4, out_dir=tmp_path, progress=False)
    assert res.new_episodes == 1 and res.redone_incomplete == 1
    assert len(list(read_jsonl(tmp_path / "steps.jsonl"))) == len(lines)


def test_api_requests_carry_per_episode_seeds(tmp_path, count_suite):
    from spatialrl.agents.loader import load_policy

    eps = count_suite.episodes({"n": 4})
    sampling = SamplingParams(temperature=0.7, max_new_tokens=4, seed=3)
    seeds = {}
    for b in (1, 3):
        with FaultyServer() as server:
            policy = load_policy(f"openai:m@{server.url}")
            run_episodes(count_suite, {}, policy, eps, batch_size=b, sampling=sampling, max_turns=2, progress=False)
            seeds[b] = sorted(s["body"]["seed"] for s in server.served)
    assert seeds[1] == seeds[3] and len(seeds[1]) == 8
    assert len(set(seeds[1])) == 8  # every episode and turn has its own seed
