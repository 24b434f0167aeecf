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


# --- issue 23, fault 9: one recorded episode per id, idle sessions expire, messages say what happened


def _finish(c, session, responses=("stop",)):
    for r in responses:
        s = c.post(f"/api/session/{session}/act", json={"response": r}).json()
    return s


def test_one_episode_id_cannot_be_open_in_two_sessions(client):
    c, out = client
    a = c.post("/api/session", json={"episode_id": "ep0"}).json()
    r = c.post("/api/session", json={"episode_id": "ep0"})
    assert r.status_code == 409 and "open in another session" in r.json()["detail"]
    _finish(c, a["session"])
    assert [e["episode_id"] for e in load_run(out).episodes] == ["ep0"]


def test_two_sessions_of_one_episode_record_it_once(tmp_path, count_suite):
    """Two servers on one run folder (each with its own sessions): the second finish is not recorded."""
    out = tmp_path / "human"
    c1 = TestClient(create_app(PlayState(count_suite, {"n": 6}, out)))
    c2 = TestClient(create_app(PlayState(count_suite, {"n": 6}, out)))
    a = c1.post("/api/session", json={"episode_id": "ep1"}).json()
    b = c2.post("/api/session", json={"episode_id": "ep1"}).json()
    ra = _finish(c1, a["session"], ("+1", "stop"))
    rb = _finish(c2, b["session"], ("stop",))
    assert ra["recorded"] and "recorded in" in ra["message"]
    assert not rb["recorded"] and "already recorded" in rb["message"]
    run = load_run(out)
    assert [e["episode_id"] for e in run.episodes] == ["ep1"]
    assert [st["response"] for st in run.steps] == ["+1", "stop"]  # only the recorded play's steps


def test_idle_sessions_expire_and_free_their_episode(tmp_path, count_suite):
    import time

    c = TestClient(create_app(PlayState(count_suite, {"n": 2}, tmp_path / "human", idle_timeout_s=0.3)))
    a = c.post("/api/session", json={}).json()
    b = c.post("/api/session", json={}).json()
    r = c.post("/api/session", json={})  # both unplayed episodes open in abandoned sessions
    assert r.status_code == 409
    msg = r.json()["detail"]
    assert "open in other sessions" in msg and "expires in" in msg and "has been played" not in msg
    time.sleep(0.45)
    r = c.post(f"/api/session/{a['session']}/act", json={"response": "stop"})
    assert r.status_code == 410 and "expired" in r.json()["detail"] and "not recorded" in r.json()["detail"]
    s = c.post("/api/session", json={}).json()  # the abandoned episodes are free again
    assert s["episode_id"] == a["episode_id"]
    assert c.get(f"/api/session/{b['session']}").status_code == 410
    _finish(c, s["session"])
    s = c.post("/api/session", json={}).json()
    _finish(c, s["session"], ("+1", "stop"))
    r = c.post("/api/session", json={})
    assert r.status_code == 409 and "every episode of this split has been played (2 recorded" in r.json()["detail"]


def test_abandoned_sessions_do_not_lock_the_page_out(tmp_path, count_suite):
    import time

    state = PlayState(count_suite, {"n": 40}, tmp_path / "human", idle_timeout_s=0.3, max_sessions=4)
    c = TestClient(create_app(state))
    for _ in range(4):
        assert c.post("/api/session", json={}).status_code == 200
    r = c.post("/api/session", json={})
    assert r.status_code == 429 and "expires in" in r.json()["detail"] and "Retry-After" in r.headers
    time.sleep(0.45)
    assert c.post("/api/session", json={}).status_code == 200  # the four abandoned ones expired
    assert len(state.sessions) == 1


def test_closing_a_session_frees_its_episode(client):
    c, _ = client
    a = c.post("/api/session", json={"episode_id": "ep2"}).json()
    r = c.post(f"/api/session/{a['session']}/close").json()
    assert r["closed"] and not r["recorded"]
    assert c.post("/api/session", json={"episode_id": "ep2"}).status_code == 200
    r = c.get(f"/api/session/{a['session']}")
    assert r.status_code == 410 and "closed" in r.json()["detail"]
