"""The human play page: one FastAPI app for playing a task in the browser and replaying recorded runs.

Humans play through the same env, budgets and success rule as models, and their episodes are written
with the runner's record layout (`rollout/records.py`) into a run folder whose agent is ``human``, so
`spatialrl eval`'s metrics and `spatialrl report` include a "human" row.

Every env call happens on the event-loop thread (all endpoints are ``async``): the offscreen renderer's
GL context belongs to the thread that created it. Each session owns its env, so browser tabs cannot
touch each other's episodes; a session lock serialises double clicks within one tab.

An episode id is open in at most one live session, and is recorded at most once: the write checks
`episodes.jsonl` under a file lock (so even two servers on one folder cannot record it twice). Sessions
idle longer than ``idle_timeout_s`` expire (their env is closed and their episode is free again); a
request for an expired session answers 410 saying so, and every 409/429 names the reason and the way out.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel

from spatialrl.envs.registry import EpisodeSpec, TaskSuite
from spatialrl.eval.runs import load_run, open_run_dir
from spatialrl.io import JsonlAppender, read_jsonl
from spatialrl.rollout.records import episode_record, step_record

STATIC = Path(__file__).parent / "static"
MAX_SESSIONS = 32
IDLE_TIMEOUT_S = 30 * 60.0
_EXPIRED_MEMORY = 1024  # expired session ids remembered, to answer 410 with what happened


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _png(image: np.ndarray) -> str:
    ok, buf = cv2.imencode(".png", cv2.cvtColor(np.asarray(image, dtype=np.uint8), cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return "data:image/png;base64," + base64.b64encode(buf.tobytes()).decode()


def encode_view(view: dict[str, Any]) -> dict[str, Any]:
    """A suite's human view with images turned into PNG data URLs (JSON-able)."""
    return {
        "images": [{"label": im["label"], "src": _png(im["image"])} for im in view.get("images", [])],
        "texts": list(view.get("texts", [])),
        "actions": list(view.get("actions", [])),
    }


@dataclass
class Session:
    id: str
    spec: EpisodeSpec
    env: Any
    obs: Any
    info: dict[str, Any]
    t: int = 0
    ret: float = 0.0
    done: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    recorded: bool = False
    message: str | None = None
    last_active: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StartRequest(BaseModel):
    episode_id: str | None = None


class ActRequest(BaseModel):
    response: str


class PlayState:
    """Sessions, the episode queue and the human run folder of one `spatialrl play` server."""

    def __init__(self, suite: TaskSuite, options: dict[str, Any], out_dir: Path, replay_dir: Path | None = None,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, max_sessions: int = MAX_SESSIONS):
        if suite.human_view is None:
            raise ValueError(f"task {suite.name!r} has no human play view")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.suite, self.options, self.out = suite, options, Path(out_dir)
        self.idle_timeout_s, self.max_sessions = float(idle_timeout_s), int(max_sessions)
        self.episodes = suite.episodes(options)
        self.by_id = {e.episode_id: e for e in self.episodes}
        self.sessions: dict[str, Session] = {}
        self.expired: OrderedDict[str, str] = OrderedDict()  # session id -> what happened to it
        open_run_dir(self.out, {"task": suite.name, "agent": "human", "options": options, "sampling": {},
                                "label": "human"})
        self.replay = load_run(replay_dir) if replay_dir is not None else None

    def finished_ids(self) -> set[str]:
        return {r["episode_id"] for r in read_jsonl(self.out / "episodes.jsonl")}

    def open_sessions(self) -> list[Session]:
        return [s for s in self.sessions.values() if not s.done]

    def expire_idle(self, now: float | None = None) -> list[str]:
        """Drop sessions idle longer than the timeout (closing their env); return their ids."""
        now = time.monotonic() if now is None else now
        gone = []
        for s in list(self.sessions.values()):
            idle = now - s.last_active
            if idle <= self.idle_timeout_s:
                continue
            del self.sessions[s.id]
            if s.done:
                what = f"episode {s.spec.episode_id!r} was finished and " + (
                    "recorded" if s.recorded else "not recorded")
            else:
                what = (f"episode {s.spec.episode_id!r} was abandoned at step {s.t} and not recorded; "
                        "it is free to play again")
                s.env.close()
            self.expired[s.id] = (f"session {s.id!r} expired after {_ago(idle)} idle (limit "
                                  f"{_ago(self.idle_timeout_s)}); {what}. Start a new task.")
            gone.append(s.id)
        while len(self.expired) > _EXPIRED_MEMORY:
            self.expired.popitem(last=False)
        return gone

    def next_episode(self) -> EpisodeSpec | None:
        busy = {s.spec.episode_id for s in self.open_sessions()}
        done = self.finished_ids()
        return next((e for e in self.episodes if e.episode_id not in done | busy), None)

    def _owner(self, episode_id: str) -> Session | None:
        return next((s for s in self.open_sessions() if s.spec.episode_id == episode_id), None)

    def view(self, s: Session) -> dict[str, Any]:
        return {
            "session": s.id,
            "episode_id": s.spec.episode_id,
            "category": s.spec.category,
            "t": s.t,
            "max_steps": s.info.get("max_steps"),
            "return": s.ret,
            "done": s.done,
            "result": s.result,
            "recorded": s.recorded,
            "message": s.message,
            "idle_timeout_s": self.idle_timeout_s,
            "view": encode_view(self.suite.human_view(s.obs, s.info)),
        }

    def start(self, episode_id: str | None) -> Session:
        now = time.monotonic()
        self.expire_idle(now)
        live = self.open_sessions()
        if len(live) >= self.max_sessions:
            oldest = min(live, key=lambda s: s.last_active)
            wait = self.idle_timeout_s - (now - oldest.last_active)
            raise HTTPException(
                429, f"too many unfinished sessions ({len(live)}, max {self.max_sessions}); finish one, or "
                     f"wait: the longest idle one expires in {_ago(wait)}",
                headers={"Retry-After": str(max(1, int(wait) + 1))})
        if episode_id is None:
            spec = self.next_episode()
            if spec is None:
                done = self.finished_ids()
                open_ids = sorted({s.spec.episode_id for s in live} - done)
                if not open_ids:
                    raise HTTPException(409, f"every episode of this split has been played ({len(done)} "
                                             f"recorded in {self.out})")
                oldest = min((s for s in live if s.spec.episode_id in open_ids), key=lambda s: s.last_active)
                raise HTTPException(
                    409, f"no free episode: the {len(open_ids)} unplayed one(s) ({', '.join(open_ids[:5])}"
                         f"{', ...' if len(open_ids) > 5 else ''}) are open in other sessions; finish them "
                         f"there, or wait: the longest idle one expires in "
                         f"{_ago(self.idle_timeout_s - (now - oldest.last_active))}")
        else:
            spec = self.by_id.get(episode_id)
            if spec is None:
                raise HTTPException(404, f"unknown episode {episode_id!r}")
            if episode_id in self.finished_ids():
                raise HTTPException(409, f"episode {episode_id!r} was already played and recorded in {self.out}")
            owner = self._owner(episode_id)
            if owner is not None:
                raise HTTPException(
                    409, f"episode {episode_id!r} is open in another session (step {owner.t}, idle "
                         f"{_ago(now - owner.last_active)}); finish it there, or wait until that session "
                         f"expires after {_ago(self.idle_timeout_s)} idle")
        env = self.suite.make_env(self.options)
        obs, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
        s = Session(id=uuid.uuid4().hex, spec=spec, env=env, obs=obs, info=info)
        self.sessions[s.id] = s
        return s

    def get(self, session_id: str) -> Session:
        self.expire_idle()
        s = self.sessions.get(session_id)
        if s is None:
            if session_id in self.expired:
                raise HTTPException(410, self.expired[session_id])
            raise HTTPException(404, f"unknown session {session_id!r} (the server may have restarted); "
                                     "start a new task")
        s.last_active = time.monotonic()
        return s

    def close(self, s: Session) -> None:
        """Abandon a session now (the page's "next task" on an unfinished one, or leaving the page)."""
        self.sessions.pop(s.id, None)
        if not s.done:
            s.env.close()
        self.expired[s.id] = (f"session {s.id!r} was closed; episode {s.spec.episode_id!r} was "
                              + ("recorded" if s.recorded else "not recorded") + ". Start a new task.")

    def _record(self, s: Session, record: dict[str, Any]) -> bool:
        """Append the episode's steps and record unless its id is already recorded (under a file lock)."""
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".play.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if s.spec.episode_id in self.finished_ids():
                    return False
                with JsonlAppender(self.out / "steps.jsonl") as steps, \
                        JsonlAppender(self.out / "episodes.jsonl") as eps:
                    for line in s.steps:
                        steps.write(line)
                    eps.write(record)
                return True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def act(self, s: Session, response: str) -> None:
        if s.done:
            raise HTTPException(409, f"episode {s.spec.episode_id!r} is finished ("
                                     + ("recorded" if s.recorded else "not recorded") + "); start the next task")
        allowed = {a["response"] for a in self.suite.human_view(s.obs, s.info)["actions"]}
        if response not in allowed:
            raise HTTPException(422, f"illegal action {response!r}; allowed: {sorted(allowed)}")
        obs, reward, terminated, truncated, info = s.env.step(response)
        s.steps.append(step_record(s.spec, s.t, response, reward, terminated, truncated, info))
        s.t += 1
        s.ret += float(reward)
        s.obs, s.info = obs, info
        if terminated or truncated:
            s.done = True
            record = episode_record(s.spec, "human", s.t, s.ret, 0, info.get("episode", {"success": False}))
            s.result = record
            s.recorded = self._record(s, record)
            s.message = (f"episode {s.spec.episode_id!r} recorded in {self.out}" if s.recorded else
                         f"episode {s.spec.episode_id!r} was already recorded in {self.out} (by another "
                         "session or server); this play was not recorded")
            s.env.close()

    # --- replay: re-simulate a recorded episode from its responses (identical pixels, nothing stored)
    def replay_frames(self, episode_id: str) -> list[dict[str, Any]]:
        if self.replay is None:
            raise HTTPException(404, "the server was not started with --replay RUN_DIR")
        spec = self.by_id.get(episode_id)
        steps = [st for st in self.replay.steps if st["episode_id"] == episode_id]
        if spec is None or not steps:
            raise HTTPException(404, f"episode {episode_id!r} is not in the replayed run")
        env = self.suite.make_env(self.replay.config.get("options", self.options))
        try:
            obs, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
            frames = [{"t": 0, "response": None, "reward": None, "view": encode_view(self.suite.human_view(obs, info))}]
            for st in sorted(steps, key=lambda r: r["t"]):
                obs, reward, _, _, info = env.step(st["response"])
                frames.append({"t": st["t"] + 1, "response": st["response"], "reward": reward,
                               "view": encode_view(self.suite.human_view(obs, info))})
        finally:
            env.close()
        return frames


def create_app(state: PlayState) -> FastAPI:
    app = FastAPI(title="spatialrl play")

    @app.get("/")
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/info")
    async def info() -> dict[str, Any]:
        state.expire_idle()
        done = state.finished_ids()
        busy = {s.spec.episode_id for s in state.open_sessions()}
        return {
            "task": state.suite.name,
            "idle_timeout_s": state.idle_timeout_s,
            "episodes": [{"episode_id": e.episode_id, "category": e.category, "played": e.episode_id in done,
                          "open": e.episode_id in busy} for e in state.episodes],
            "replay": None if state.replay is None else
            [{"episode_id": r["episode_id"], "success": r.get("success"), "agent": r.get("agent")}
             for r in state.replay.episodes],
        }

    @app.post("/api/session")
    async def start(req: StartRequest) -> dict[str, Any]:
        return state.view(state.start(req.episode_id))

    @app.get("/api/session/{session_id}")
    async def get(session_id: str) -> dict[str, Any]:
        return state.view(state.get(session_id))

    @app.post("/api/session/{session_id}/act")
    async def act(session_id: str, req: ActRequest) -> dict[str, Any]:
        s = state.get(session_id)
        async with s.lock:
            state.act(s, req.response)
            return state.view(s)

    @app.post("/api/session/{session_id}/close")
    async def close(session_id: str) -> dict[str, Any]:
        s = state.get(session_id)
        async with s.lock:
            state.close(s)
        return {"session": session_id, "closed": True, "recorded": s.recorded}

    @app.get("/api/replay/{episode_id}")
    async def replay(episode_id: str) -> dict[str, Any]:
        return {"episode_id": episode_id, "frames": state.replay_frames(episode_id)}

    return app
