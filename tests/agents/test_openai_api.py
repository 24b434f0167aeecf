"""OpenAIPolicy against a real HTTP server on loopback that injects 429 / 500 / slow responses."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.openai_api import OpenAIPolicy, to_openai_messages

from .openai_server import FaultyServer


def conv(text: str, images: tuple[tuple[int, int], ...] = ()) -> list[dict]:
    parts = [{"type": "image", "image": np.full((h, w, 3), 7, np.uint8)} for w, h in images]
    return [{"role": "system", "content": [{"type": "text", "text": "You navigate."}]},
            {"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


@pytest.fixture
def server():
    with FaultyServer(slow_seconds=2.5) as s:
        yield s


def test_retries_and_per_conversation_failure(server: FaultyServer, monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-test")
    policy = OpenAIPolicy("m", base_url=server.url, api_key_env="TEST_KEY", concurrency=4, timeout=1.0,
                          max_retries=3, backoff_base=0.01, backoff_max=0.05)
    convs = [
        conv("id=ok plain", images=((32, 24),)),
        conv("id=limited [429x1]"),
        conv("id=flaky [500x2]", images=((16, 16), (20, 10))),
        conv("id=slow [slowx1]"),
        conv("id=dead [always500]"),
        conv("id=client [400]"),
    ]
    t0 = time.monotonic()
    gens = policy.generate(convs, SamplingParams(temperature=0.0, max_new_tokens=16, seed=1))
    elapsed = time.monotonic() - t0
    by_id = dict(zip(["ok", "limited", "flaky", "slow", "dead", "client"], gens, strict=True))
    # Successes (after retries) carry the server's answer; images arrived as decodable base64 data URLs.
    assert by_id["ok"].text == "id=ok images=32x24" and by_id["ok"].error is None
    assert by_id["flaky"].text == "id=flaky images=16x16,20x10"
    assert by_id["limited"].text.startswith("id=limited") and by_id["slow"].text.startswith("id=slow")
    assert server.attempts["limited"] == 2 and server.attempts["flaky"] == 3 and server.attempts["slow"] == 2
    assert by_id["flaky"].extra["attempts"] == 3
    # Retry-After: 1 was honoured even though the backoff alone is at most 0.05 s.
    assert elapsed >= 1.0
    # Failures: 5xx forever -> error after 1 + max_retries attempts; 400 -> no retry.
    assert by_id["dead"].error and "HTTP 500" in by_id["dead"].error and by_id["dead"].text == ""
    assert server.attempts["dead"] == 4
    assert by_id["client"].error and "HTTP 400" in by_id["client"].error and server.attempts["client"] == 1
    # Usage accounting equals what the server reported for the successful answers.
    served = [s for s in server.served]
    assert policy.usage["requests"] == len(served) == 4
    assert policy.usage["prompt_tokens"] == sum(g.prompt_tokens for g in gens if g.error is None)
    assert policy.usage["completion_tokens"] == sum(g.completion_tokens for g in gens if g.error is None) == 4 * 2
    assert policy.usage["failures"] == 2
    assert policy.usage["retries"] == 1 + 2 + 1 + 3
    # Request body: sampling fields and auth header.
    body = served[0]["body"]
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0 and body["seed"] == 1 and body["model"] == "m"
    assert set(server.auth) == {"Bearer sk-test"}


def test_concurrency_is_bounded():
    with FaultyServer(work_seconds=0.15) as server:
        policy = OpenAIPolicy("m", base_url=server.url, api_key="k", concurrency=2, timeout=5)
        gens = policy.generate([conv(f"id=c{i}") for i in range(6)], SamplingParams())
        assert [g.text for g in gens] == [f"id=c{i} images=" for i in range(6)]
        assert server.max_in_flight == 2


def test_generate_inside_running_event_loop(server: FaultyServer):
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5)

    async def caller():
        return policy.generate([conv("id=a"), conv("id=b")], SamplingParams())

    gens = asyncio.run(caller())
    assert [g.text for g in gens] == ["id=a images=", "id=b images="]


def test_unreachable_server_is_an_error_not_an_exception():
    policy = OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=0.5, max_retries=1,
                          backoff_base=0.01)
    gens = policy.generate([conv("id=x")], SamplingParams())
    assert gens[0].error and "connection error" in gens[0].error


def test_message_conversion():
    msgs = to_openai_messages(conv("hi", images=((3, 2),)) + [{"role": "assistant", "content": [{"type": "text", "text": "ok"}]}])
    assert msgs[0] == {"role": "system", "content": "You navigate."}
    assert msgs[1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert msgs[1]["content"][1] == {"type": "text", "text": "hi"}
    assert msgs[2] == {"role": "assistant", "content": "ok"}
