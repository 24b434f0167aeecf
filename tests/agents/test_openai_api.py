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


# ---------------------------------------------------------------------- issue 23: misbehaving servers
MALFORMED = ["msgstr", "contentint", "contentdict", "notjson", "jsonlist", "nochoices", "choicestr"]


def test_malformed_answers_are_per_conversation_errors(server: FaultyServer):
    """200 answers of the wrong shape: each is that conversation's error, the others are answered."""
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5, max_retries=0)
    convs = [conv(f"id={name} [{name}]") for name in MALFORMED] + [conv("id=fine")]
    gens = policy.generate(convs, SamplingParams())
    for name, gen in zip(MALFORMED, gens, strict=False):
        assert gen.error and gen.error.startswith("malformed response"), (name, gen)
        assert gen.text == ""
    assert gens[-1].error is None and gens[-1].text == "id=fine images="
    assert policy.usage["failures"] == len(MALFORMED) and policy.usage["requests"] == len(MALFORMED) + 1
    # one attempt each: a malformed answer is the server's bug, asking again would only cost money
    assert all(server.attempts[name] == 1 for name in MALFORMED)


def test_bad_usage_and_logprobs_are_dropped_not_fatal(server: FaultyServer):
    """Usage and logprobs only feed accounting: a bad one is dropped (and noted), the answer is kept."""
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5, max_retries=0)
    names = ["usagestr", "usagecountstr", "lpnolp", "logprobs"]
    gens = dict(zip(names, policy.generate([conv(f"id={n} [{n}]") for n in names], SamplingParams()),
                    strict=True))
    assert all(g.error is None and g.text == f"id={n} images=" for n, g in gens.items())
    assert gens["usagestr"].prompt_tokens is None and "usage" in gens["usagestr"].extra["warnings"][0]
    # "12" is a count written as a string (accepted); "lots" is not a count (dropped)
    assert gens["usagecountstr"].prompt_tokens == 12 and gens["usagecountstr"].completion_tokens is None
    assert gens["lpnolp"].logprobs is None and "logprob" in gens["lpnolp"].extra["warnings"][0]
    assert gens["logprobs"].logprobs == [-0.5, -0.5] and "warnings" not in gens["logprobs"].extra
    assert policy.usage["failures"] == 0 and policy.usage["prompt_tokens"] == 12 + 2 * gens["logprobs"].prompt_tokens


def _generate_within(policy: OpenAIPolicy, convs: list, seconds: float, **sampling) -> list:
    """``policy.generate`` in a thread; fails the test (instead of hanging it) when it takes longer."""
    import threading

    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", policy.generate(convs, SamplingParams(**sampling))),
                              daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"generate still running after {seconds}s"
    return box["out"]


def test_retry_after_beyond_the_cap_gives_up(server: FaultyServer):
    """``Retry-After: 3600`` must not hang the run: over the cap the request gives up, counted."""
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5, max_retries=3, backoff_base=0.01)
    t0 = time.monotonic()
    gens = _generate_within(policy, [conv("id=later [ra3600]"), conv("id=now")], 20)
    assert time.monotonic() - t0 < 5
    assert gens[1].error is None
    assert "HTTP 429" in gens[0].error and "3600" in gens[0].error and "--api-max-wait" in gens[0].error
    assert server.attempts["later"] == 1 and policy.usage["retry_after_over_cap"] == 1
    assert policy.usage["failures"] == 1


def test_retry_after_cap_is_configurable(server: FaultyServer):
    # Retry-After: 1 is honoured under a 2 s cap (first test) and gives up under a 0.5 s cap
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5, max_retries=3, backoff_base=0.01,
                          max_wait=0.5)
    gens = _generate_within(policy, [conv("id=limited [429x1]")], 10)
    assert "Retry-After" in gens[0].error and policy.usage["retry_after_over_cap"] == 1
    assert server.attempts["limited"] == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"timeout": 0}, "timeout"), ({"timeout": float("nan")}, "timeout"), ({"max_retries": -1}, "retries"),
    ({"max_wait": -1}, "wait"), ({"max_wait": float("inf")}, "wait"),
])
def test_client_options_are_checked(kwargs, message):
    from spatialrl.errors import DataError

    with pytest.raises(DataError, match=message):
        OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1", **kwargs)


def test_trickling_server_times_out_as_a_whole(server: FaultyServer):
    """The timeout bounds the whole attempt (a slow answer cannot hold a slot forever)."""
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=0.5, max_retries=0)
    t0 = time.monotonic()
    gens = _generate_within(policy, [conv("id=drip [trickle]")], 10)
    assert gens[0].error and gens[0].error.startswith("timeout after 0.5s") and time.monotonic() - t0 < 2


def test_huge_answer_is_truncated_to_the_token_budget(server: FaultyServer):
    """A server that ignores ``max_tokens`` (2 MB answer for 8 tokens) cannot flood steps and logs."""
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=10, max_retries=0)
    gen = policy.generate([conv("id=big [huge]")], SamplingParams(max_new_tokens=8))[0]
    assert gen.error is None and gen.text.startswith("id=big images= Action: MoveAhead.")
    assert len(gen.text.encode()) <= 8 * policy.max_chars_per_token
    assert gen.extra["truncated_from_chars"] > 1_900_000 and gen.extra["finish_reason"] == "length"
    assert policy.usage["truncated"] == 1
    # an answer within the budget is untouched
    ok = policy.generate([conv("id=small")], SamplingParams(max_new_tokens=8))[0]
    assert ok.text == "id=small images=" and "truncated_from_chars" not in ok.extra


def test_oversized_body_is_an_error(server: FaultyServer):
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=10, max_retries=0,
                          max_response_bytes=100_000)
    gen = policy.generate([conv("id=big [huge]")], SamplingParams(max_new_tokens=8))[0]
    assert gen.error and "larger than 100000 bytes" in gen.error


def test_retry_after_is_moot_without_retries(server: FaultyServer):
    policy = OpenAIPolicy("m", base_url=server.url, api_key="k", timeout=5, max_retries=0)
    gen = _generate_within(policy, [conv("id=later [ra3600]")], 10)[0]
    assert gen.error.startswith("HTTP 429") and gen.error.endswith("(after 1 attempts)")
    assert policy.usage["retry_after_over_cap"] == 0
