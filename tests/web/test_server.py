"""Server-side validation and session isolation of the play page (on the toy counting task)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from spatialrl.eval.runs import load_run
from spatialrl.rollout.runner import run_episodes
from spatialrl.web.server import PlayState, create_app


@pytest.fixture
def client(tmp_path, count_suite):
    state = PlayState(count_suite, {"n": 6}, tmp_path / "human")
    return TestClient(create_app(state)), tmp_path / "human"


def test_play_records_like_a_model_run(client):
    c, out = client
    s = c.post("/api/session", json={}).json()
    assert s["episode_id"] == "ep0" and s["view"]["images"][0]["src"].startswith("data:image/png;base64,")
    s = c.post(f"/api/session/{s['session']}/act", json={"response": "stop"}).json()
    assert s["done"] and s["result"]["success"] and s["result"]["agent"] == "human"
    s2 = c.post("/api/session", json={}).json()  # next task skips the played one
    assert s2["episode_id"] == "ep1"
    for r in ("+1", "stop"):
        s2 = c.post(f"/api/session/{s2['session']}/act", json={"response": r}).json()
    run = load_run(out)
    assert [e["episode_id"] for e in run.episodes] == ["ep0", "ep1"]
    assert [st["response"] for st in run.steps] == ["stop", "+1", "stop"]
    assert run.config["label"] == "human"


def test_validation_errors_are_clear_4xx(client):
    c, _ = client
    assert c.post("/api/session/nope/act", json={"response": "+1"}).status_code == 404
    assert c.get("/api/session/nope").status_code == 404
    assert c.post("/api/session", json={"episode_id": "ep99"}).status_code == 404
    s = c.post("/api/session", json={}).json()
    r = c.post(f"/api/session/{s['session']}/act", json={"response": "rm -rf /"})
    assert r.status_code == 422 and "illegal action" in r.json()["detail"]
    assert c.post(f"/api/session/{s['session']}/act", json={}).status_code == 422  # missing field
    c.post(f"/api/session/{s['session']}/act", json={"response": "stop"})
    r = c.post(f"/api/session/{s['session']}/act", json={"response": "stop"})
    assert r.status_code == 409 and "finished" in r.json()["detail"]
    assert c.post("/api/session", json={"episode_id": "ep0"}).status_code == 409  # already played


def test_concurrent_sessions_do_not_mix(client):
    c, out = client
    a = c.post("/api/session", json={}).json()
    b = c.post("/api/session", json={}).json()
    assert a["episode_id"] != b["episode_id"]  # two tabs get different tasks
    c.post(f"/api/session/{b['session']}/act", json={"response": "+1"})
    c.post(f"/api/session/{a['session']}/act", json={"response": "stop"})
    assert c.get(f"/api/session/{b['session']}").json()["t"] == 1
    c.post(f"/api/session/{b['session']}/act", json={"response": "stop"})
    run = load_run(out)
    by_ep = {}
    for st in run.steps:
        by_ep.setdefault(st["episode_id"], []).append(st["response"])
    assert by_ep == {a["episode_id"]: ["stop"], b["episode_id"]: ["+1", "stop"]}


def test_replay_resimulates_a_recorded_run(tmp_path, count_suite):
    from spatialrl.agents.expert import ExpertPolicy
    from spatialrl.eval.runs import open_run_dir

    model_run = tmp_path / "model"
    open_run_dir(model_run, {"task": "count", "agent": "expert", "options": {"n": 6}, "sampling": {}})
    run_episodes(count_suite, {"n": 6}, ExpertPolicy(), count_suite.episodes({"n": 6}), out_dir=model_run,
                 progress=False)
    c = TestClient(create_app(PlayState(count_suite, {"n": 6}, tmp_path / "human", replay_dir=model_run)))
    frames = c.get("/api/replay/ep3").json()["frames"]
    assert [f["response"] for f in frames] == [None, "+1", "+1", "+1", "stop"]
    assert [f["view"]["texts"][0]["text"] for f in frames] == ["n=0", "n=1", "n=2", "n=3", "n=3"]
    assert c.get("/api/replay/nope").status_code == 404
