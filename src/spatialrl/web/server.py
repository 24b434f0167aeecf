"""The human play page: one FastAPI app for playing a task in the browser and replaying recorded runs.

Humans play through the same env, budgets and success rule as models, and their episodes are written
with the runner's record layout (`rollout/records.py`) into a run folder whose agent is ``human``, so
`spatialrl eval`'s metrics and `spatialrl report` include a "human" row.

Every env call happens on the event-loop thread (all endpoints are ``async``): the offscreen renderer's
GL context belongs to the thread that created it. Each session owns its env, so browser tabs cannot
touch each other's episodes; a session lock serialises double clicks within one tab.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
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
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StartRequest(BaseModel):
    episode_id: str | None = None


class ActRequest(BaseModel):
    response: str


class PlayState:
    """Sessions, the episode queue and the human run folder of one `spatialrl play` server."""

    def __init__(self, suite: TaskSuite, options: dict[str, Any], out_dir: Path, replay_dir: Path | None = None):
        if suite.human_view is None:
            raise ValueError(f"task {suite.name!r} has no human play view")
        self.suite, self.options, self.out = suite, options, Path(out_dir)
        self.episodes = suite.episodes(options)
        self.by_id = {e.episode_id: e for e in self.episodes}
        self.sessions: dict[str, Session] = {}
        open_run_dir(self.out, {"task": suite.name, "agent": "human", "options": options, "sampling": {},
                                "label": "human"})
        self.replay = load_run(replay_dir) if replay_dir is not None else None

    def finished_ids(self) -> set[str]:
        return {r["episode_id"] for r in read_jsonl(self.out / "episodes.jsonl")}

    def next_episode(self) -> EpisodeSpec | None:
        busy = {s.spec.episode_id for s in self.sessions.values() if not s.done}
        done = self.finished_ids()
        return next((e for e in self.episodes if e.episode_id not in done | busy), None)

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
            "view": encode_view(self.suite.human_view(s.obs, s.info)),
        }

    def start(self, episode_id: str | None) -> Session:
        if len([s for s in self.sessions.values() if not s.done]) >= MAX_SESSIONS:
            raise HTTPException(429, f"too many open sessions (max {MAX_SESSIONS})")
        if episode_id is None:
            spec = self.next_episode()
            if spec is None:
                raise HTTPException(409, "every episode of this split has been played")
        else:
            spec = self.by_id.get(episode_id)
            if spec is None:
                raise HTTPException(404, f"unknown episode {episode_id!r}")
            if episode_id in self.finished_ids():
                raise HTTPException(409, f"episode {episode_id!r} was already played")
        env = self.suite.make_env(self.options)
        obs, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
        s = Session(id=uuid.uuid4().hex, spec=spec, env=env, obs=obs, info=info)
        self.sessions[s.id] = s
        return s

    def get(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise HTTPException(404, f"unknown session {session_id!r}")
        return s

    def act(self, s: Session, response: str) -> None:
        if s.done:
            raise HTTPException(409, "this episode is finished; start the next task")
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
            with JsonlAppender(self.out / "steps.jsonl") as steps, JsonlAppender(self.out / "episodes.jsonl") as eps:
                for line in s.steps:
                    steps.write(line)
                eps.write(record)
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
        done = state.finished_ids()
        return {
            "task": state.suite.name,
            "episodes": [{"episode_id": e.episode_id, "category": e.category, "played": e.episode_id in done}
                         for e in state.episodes],
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

    @app.get("/api/replay/{episode_id}")
    async def replay(episode_id: str) -> dict[str, Any]:
        return {"episode_id": episode_id, "frames": state.replay_frames(episode_id)}

    return app
