"""End to end in headless Chromium (Debian's package, driven by Playwright; no browser download):
play a tiny TVR task to success with the oracle's keys and a V-IRL episode by clicking, then check the
recorded episodes and metrics, and take a screenshot that shows both TVR images."""

from __future__ import annotations

import re
import shutil
import threading
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup.sh installs it)"),
]


class Server:
    """uvicorn in a background thread on an ephemeral loopback port."""

    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def _current_session(state):
    (session,) = [s for s in state.sessions.values() if not s.done]
    return session


def test_play_tvr_with_the_oracle_keys(tmp_path, browser):
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.eval.runs import load_run
    from spatialrl.web.server import PlayState, create_app

    bench = tmp_path / "bench"
    make_bench(bench, BenchConfig.preset(tiny=True, sizes={"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                            "diag_move": 0}, scenes={"eval": 2, "sft": 0, "rl": 0}),
               progress=False)
    suite = get_suite("tvr")
    state = PlayState(suite, {**suite.default_options, "data": str(bench), "width": 320, "height": 180},
                      tmp_path / "human")
    keys = {"MoveAhead": "w", "MoveBack": "s", "MoveLeft": "a", "MoveRight": "d", "RotateLeft": "q",
            "RotateRight": "e", "LookUp": "r", "LookDown": "f", "Stop": "Space"}
    with Server(create_app(state)) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        page.wait_for_selector("#images img")
        for _ in range(60):
            session = _current_session(state)
            t = session.t
            action = session.info["expert_response"].split(":", 1)[1].strip()
            page.keyboard.press(keys[action])
            page.wait_for_function(f"document.getElementById('status').textContent.includes('step {t + 1}')")
            if session.done:
                break
        page.wait_for_selector("#result.ok")
        assert page.inner_text("#result") == "Success!"
        page.screenshot(path=str(tmp_path / "tvr.png"))
        sizes = page.eval_on_selector_all("#images img", "els => els.map(e => [e.alt, e.naturalWidth])")
        assert sizes == [["current view", 320], ["target view", 320]]
        page.close()
    assert (tmp_path / "tvr.png").stat().st_size > 10_000
    run = load_run(tmp_path / "human")
    assert len(run.episodes) == 1 and run.episodes[0]["success"] and run.episodes[0]["agent"] == "human"
    metrics = suite.summarize(run.episodes)
    assert metrics["overall"]["success_rate"] == 1.0 and metrics["overall"]["spl"] == pytest.approx(1.0)
    assert [s["t"] for s in run.steps] == list(range(len(run.steps)))


def test_play_virl_by_clicking(tmp_path, browser):
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.virl.testdata import random_routes, write_dataset
    from spatialrl.eval.runs import load_run
    from spatialrl.web.server import PlayState, create_app

    data = tmp_path / "toy"
    write_dataset(data, random_routes(3, 0))
    suite = get_suite("virl")
    state = PlayState(suite, {**suite.default_options, "data": str(data), "grid_size": 448, "episodes": 2},
                      tmp_path / "human")
    with Server(create_app(state)) as url:
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#images img")
        for _ in range(60):
            session = _current_session(state)
            t = session.t
            action = re.search(r'"action": "(.*?)"', session.info["expert_response"]).group(1)
            page.get_by_role("button", name=re.compile("^" + re.escape(action))).click()
            page.wait_for_function(f"document.getElementById('status').textContent.includes('step {t + 1}')")
            if session.done:
                break
        page.wait_for_selector("#result.ok")
        page.close()
    run = load_run(tmp_path / "human")
    assert len(run.episodes) == 1 and run.episodes[0]["success"]
    assert suite.summarize(run.episodes)["overall"]["success_rate"] == 1.0
