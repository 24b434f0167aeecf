"""OpenAI-compatible chat servers (``vllm serve``, SGLang, hosted APIs) as a :class:`Policy`.

Requests go to ``{base_url}/chat/completions`` with async httpx: at most ``concurrency`` in flight
(an ``asyncio.Semaphore``), each attempt bounded by ``timeout`` as a whole (a server trickling bytes
cannot hold a slot); 429, 5xx, timeouts and dropped connections are retried with exponential backoff and
full jitter, waiting at least the server's ``Retry-After`` -- unless it asks for more than ``max_wait``
seconds, then the request gives up at once (counted in ``usage["retry_after_over_cap"]``). A
conversation that still fails gets ``Generation(error=...)``; the others are unaffected. Images are
sent inline as base64 data URLs (PNG by default: lossless, so the server sees the env's pixels).

Servers are not trusted: an answer of the wrong shape (``message`` a string, ``content`` an int, no
choices, not JSON) is that conversation's ``malformed response`` error, never an exception; unusable
``usage`` counts or ``logprobs`` are dropped with a note in ``extra["warnings"]``. Bodies over
``max_response_bytes`` are refused, and an answer longer than the token budget allows
(``max_new_tokens * max_chars_per_token`` characters: the server ignored ``max_tokens``) is cut to it
before anyone steps or logs it.

Why not the official ``openai`` client (measured with openai 3.60, see docs/troubleshooting.md): it
builds responses without validating them (``message`` as a string still raises ``AttributeError``,
content ``7`` comes back as ``7``), so the checks here would be needed anyway; its Retry-After cap is a
fixed 120 s and its backoff is not configurable; and it does not report attempts per request.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
import random
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from spatialrl.agents.base import Conversation, Generation, SamplingParams
from spatialrl.errors import DataError

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def image_data_url(image: Any, fmt: str = "png", quality: int = 90) -> str:
    """An image part's payload (uint8 HxWx3 array or PIL image) as a ``data:image/...;base64,`` URL."""
    from spatialrl.models.encode import to_pil

    buf = io.BytesIO()
    pil = to_pil(image)
    if fmt == "jpeg":
        pil.save(buf, format="JPEG", quality=quality)
    else:
        pil.save(buf, format="PNG")
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def to_openai_messages(conversation: Conversation, image_format: str = "png") -> list[dict[str, Any]]:
    """Our chat format -> OpenAI's. Text-only messages become plain strings (every server accepts
    those for every role); messages with images become content lists with ``image_url`` parts."""
    out = []
    for message in conversation:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        if not any(part.get("type") == "image" for part in content):
            out.append({"role": message["role"], "content": "".join(p.get("text", "") for p in content)})
            continue
        parts = []
        for part in content:
            if part.get("type") == "image":
                parts.append({"type": "image_url", "image_url": {"url": image_data_url(part["image"], image_format)}})
            elif part.get("type") == "text":
                parts.append({"type": "text", "text": part["text"]})
            else:
                raise DataError(f"message part: unknown type {part.get('type')!r} (expected 'text' or 'image')")
        out.append({"role": message["role"], "content": parts})
    return out


def _retry_after_seconds(response: httpx.Response) -> float | None:
    """The server's requested wait: ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP date.
    ``inf`` for a wait too large to represent; ``None`` when absent or unreadable."""
    ms = response.headers.get("retry-after-ms")
    if ms:
        try:
            value_ms = float(ms)
        except ValueError:
            value_ms = math.nan
        if not math.isnan(value_ms):
            return max(0.0, value_ms / 1000.0)
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, OverflowError, IndexError):
            return None
    return None if math.isnan(seconds) else max(0.0, seconds)


def _count(value: Any) -> int | None:
    """A token count as the server wrote it: an int, or an int in a string; anything else is unusable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class MalformedResponse(Exception):
    """A 200 answer whose shape is not a chat completion (the message says which field)."""


def _content_text(message: Any) -> tuple[str, str | None]:
    """``(text, refusal)`` of ``choices[0].message``; raises :class:`MalformedResponse` for a bad shape."""
    if not isinstance(message, dict):
        raise MalformedResponse(f"choices[0].message is {_kind(message)}, expected an object")
    content = message.get("content")
    refusal = message.get("refusal") if isinstance(message.get("refusal"), str) else None
    if content is None:
        return "", refusal
    if isinstance(content, str):
        return content, refusal
    if isinstance(content, list):  # some servers return content parts
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict):
                raise MalformedResponse(f"choices[0].message.content[{i}] is {_kind(part)}, expected an object")
            text = part.get("text")
            if part.get("type", "text") == "text":
                if not isinstance(text, str):
                    raise MalformedResponse(f"choices[0].message.content[{i}].text is {_kind(text)}, "
                                            "expected a string")
                texts.append(text)
        return "".join(texts), refusal
    raise MalformedResponse(f"choices[0].message.content is {_kind(content)}, expected a string or a list of parts")


def check_client_options(timeout: float, max_retries: int, max_wait: float) -> None:
    """Raise a :class:`DataError` naming the option (and its CLI flag) for an unusable value."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise DataError(f"API timeout (--api-timeout) must be a number of seconds > 0, got {timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise DataError(f"API retries (--api-retries) must be an integer >= 0, got {max_retries!r}")
    if not (isinstance(max_wait, int | float) and math.isfinite(max_wait) and max_wait >= 0):
        raise DataError(f"API max wait (--api-max-wait) must be a number of seconds >= 0, got {max_wait!r}")


class OpenAIPolicy:
    """Chat-completions client with bounded concurrency and retries. ``usage`` accumulates token counts
    and what went wrong: ``retries``, ``failures`` (conversations answered with an error),
    ``malformed`` (answers of the wrong shape), ``retry_after_over_cap`` (gave up: the server asked to
    wait more than ``max_wait``), ``truncated`` (answers cut to the token budget)."""

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        max_wait: float = 60.0,
        max_response_bytes: int = 32 * 2**20,
        max_chars_per_token: int = 32,
        image_format: str = "png",
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        check_client_options(timeout, max_retries, max_wait)
        if max_response_bytes < 1 or max_chars_per_token < 1:
            raise ValueError("max_response_bytes and max_chars_per_token must be >= 1")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_wait = float(max_wait)
        self.max_response_bytes = max_response_bytes
        self.max_chars_per_token = max_chars_per_token
        self.image_format = image_format
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self.name = name or f"openai:{model}@{self.base_url}"
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "failures": 0,
                      "malformed": 0, "retry_after_over_cap": 0, "truncated": 0}
        self._jitter = random.Random()

    # ------------------------------------------------------------------ sync entry point
    def generate(
        self,
        conversations: list[Conversation],
        sampling: SamplingParams,
        infos: list[dict[str, Any]] | None = None,
    ) -> list[Generation]:
        """Run the batch concurrently. Works from plain code and from inside a running event loop
        (then the requests run on a private loop in a helper thread)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(conversations, sampling))
        box: dict[str, Any] = {}

        def worker() -> None:
            try:
                box["out"] = asyncio.run(self.agenerate(conversations, sampling))
            except BaseException as e:  # re-raised in the caller's thread
                box["err"] = e

        thread = threading.Thread(target=worker, name="openai-policy")
        thread.start()
        thread.join()
        if "err" in box:
            raise box["err"]
        return box["out"]

    # ------------------------------------------------------------------ async
    async def agenerate(self, conversations: list[Conversation], sampling: SamplingParams) -> list[Generation]:
        semaphore = asyncio.Semaphore(self.concurrency)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(headers=headers, timeout=self.timeout, limits=limits) as client:
            # each request gets its episode's own seed (SamplingParams.streams): the same at any batch size
            tasks = [self._one(client, semaphore, c, sampling.for_conversation(i)) for i, c in enumerate(conversations)]
            return list(await asyncio.gather(*tasks))

    def request_body(self, conversation: Conversation, sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(conversation, self.image_format),
            "temperature": max(0.0, sampling.temperature),
            self.max_tokens_field: sampling.max_new_tokens,
        }
        if sampling.top_p < 1.0:
            body["top_p"] = sampling.top_p
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        body.update(self.extra_body)
        return body

    async def _post(self, client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """One attempt: status, headers and at most ``max_response_bytes`` of the body (error bodies: 4 KiB).
        Raises ``TimeoutError`` when the whole attempt takes longer than ``timeout``."""
        async with asyncio.timeout(self.timeout):
            async with client.stream("POST", url, json=body) as response:
                cap = self.max_response_bytes if response.status_code == 200 else 4096
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        if response.status_code == 200:
                            raise MalformedResponse(f"body larger than {cap} bytes (max_response_bytes)")
                        break
                return response.status_code, response.headers, b"".join(chunks)[:cap]

    async def _one(self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, conversation: Conversation,
                   sampling: SamplingParams) -> Generation:
        try:
            return await self._attempts(client, semaphore, conversation, sampling)
        except Exception as e:  # noqa: BLE001 - one conversation's failure must never end the batch
            self.usage["failures"] += 1
            return Generation(text="", error=f"client error: {type(e).__name__}: {e}")

    async def _attempts(self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore,
                        conversation: Conversation, sampling: SamplingParams) -> Generation:
        try:
            body = self.request_body(conversation, sampling)
        except (DataError, ValueError, KeyError, TypeError) as e:
            self.usage["failures"] += 1
            return Generation(text="", error=f"bad conversation: {e}")
        url = f"{self.base_url}/chat/completions"
        last_error = ""
        attempts = 0
        for attempt in range(self.max_retries + 1):
            attempts = attempt + 1
            wait: float | None = None
            async with semaphore:
                try:
                    status, headers, content = await self._post(client, url, body)
                except (TimeoutError, httpx.TimeoutException) as e:
                    last_error = f"timeout after {self.timeout:g}s ({type(e).__name__})"
                except httpx.TransportError as e:
                    last_error = f"connection error: {type(e).__name__}: {e}"
                except MalformedResponse as e:
                    return self._malformed(str(e), b"", attempts)
                else:
                    if status == 200:
                        return self._parse(content, sampling, attempts)
                    last_error = f"HTTP {status}: {content[:300].decode('utf-8', 'replace')}"
                    if status not in RETRY_STATUS:
                        break  # 400/401/404...: retrying cannot help
                    wait = _retry_after_seconds(httpx.Response(status, headers=headers))
                    if wait is not None and wait > self.max_wait and attempt < self.max_retries:
                        self.usage["retry_after_over_cap"] += 1
                        self.usage["failures"] += 1
                        return Generation(
                            text="", extra={"attempts": attempts},
                            error=f"{last_error} (server asked to wait {wait:g}s (Retry-After) before retrying, "
                                  f"more than the {self.max_wait:g}s cap (--api-max-wait); gave up after "
                                  f"{attempts} attempts)")
            if attempt < self.max_retries:
                self.usage["retries"] += 1
                backoff = self._jitter.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))
                await asyncio.sleep(min(self.max_wait, max(backoff, wait or 0.0)))
        self.usage["failures"] += 1
        return Generation(text="", error=f"{last_error} (after {attempts} attempts)", extra={"attempts": attempts})

    def _malformed(self, why: str, content: bytes, attempts: int) -> Generation:
        self.usage["malformed"] += 1
        self.usage["failures"] += 1
        excerpt = content[:300].decode("utf-8", "replace")
        return Generation(text="", error=f"malformed response: {why}" + (f": {excerpt}" if excerpt else ""),
                          extra={"attempts": attempts})

    def _parse(self, content: bytes, sampling: SamplingParams, attempts: int) -> Generation:
        """A 200 body -> Generation. Never raises: a bad shape is this conversation's error."""
        self.usage["requests"] += 1
        try:
            data = json.loads(content)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            return self._malformed(f"not JSON ({e})", content, attempts)
        try:
            if not isinstance(data, dict):
                raise MalformedResponse(f"body is a JSON {_kind(data)}, expected an object")
            choices = data.get("choices")
            if not isinstance(choices, list) or not choices:
                raise MalformedResponse(f"choices is {_kind(choices) if not isinstance(choices, list) else 'empty'}, "
                                        "expected a non-empty list")
            choice = choices[0]
            if not isinstance(choice, dict):
                raise MalformedResponse(f"choices[0] is {_kind(choice)}, expected an object")
            text, refusal = _content_text(choice.get("message"))
        except MalformedResponse as e:
            return self._malformed(str(e), content, attempts)
        warnings: list[str] = []
        extra: dict[str, Any] = {"attempts": attempts}
        finish = choice.get("finish_reason")
        extra["finish_reason"] = finish if isinstance(finish, str) else None
        if refusal:
            extra["refusal"] = refusal[:1000]
        usage = data.get("usage")
        prompt_tokens = completion_tokens = None
        if isinstance(usage, dict):
            prompt_tokens, completion_tokens = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            bad = [k for k in ("prompt_tokens", "completion_tokens") if k in usage and _count(usage[k]) is None]
            if bad:
                warnings.append(f"usage: unusable {', '.join(f'{k}={usage[k]!r:.40}' for k in bad)} (dropped)")
        elif usage is not None:
            warnings.append(f"usage is {_kind(usage)}, expected an object (dropped)")
        self.usage["prompt_tokens"] += prompt_tokens or 0
        self.usage["completion_tokens"] += completion_tokens or 0
        logprobs = None
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and isinstance(lp.get("content"), list):
            entries = lp["content"]
            values = [e.get("logprob") if isinstance(e, dict) else None for e in entries]
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                logprobs = [float(v) for v in values]
            else:
                warnings.append("logprobs: an entry has no numeric logprob (dropped)")
        # A server that ignored max_tokens: cut the answer to what the budget can hold before anyone
        # steps an env with it or writes it to steps.jsonl.
        budget = sampling.max_new_tokens * self.max_chars_per_token
        if len(text) > budget:
            extra["truncated_from_chars"] = len(text)
            extra["finish_reason"] = "length"
            # characters and bytes both within budget (a cut multi-byte character is dropped)
            text = text[:budget].encode("utf-8")[:budget].decode("utf-8", "ignore")
            if logprobs is not None:
                logprobs = logprobs[: sampling.max_new_tokens]
            self.usage["truncated"] += 1
            warnings.append(f"answer of {extra['truncated_from_chars']} characters cut to {budget} "
                            f"(max_new_tokens {sampling.max_new_tokens} x {self.max_chars_per_token})")
        if warnings:
            extra["warnings"] = warnings
        return Generation(text=text, logprobs=logprobs, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, extra=extra)
