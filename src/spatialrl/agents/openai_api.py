"""OpenAI-compatible chat servers (``vllm serve``, SGLang, hosted APIs) as a :class:`Policy`.

Requests go to ``{base_url}/chat/completions`` with async httpx: at most ``concurrency`` in flight
(an ``asyncio.Semaphore``), each with a timeout; 429, 5xx, timeouts and dropped connections are
retried with exponential backoff and full jitter, waiting at least the server's ``Retry-After``. A
conversation that still fails gets ``Generation(error=...)``; the others are unaffected. Images are
sent inline as base64 data URLs (PNG by default: lossless, so the server sees the env's pixels).
"""

from __future__ import annotations

import asyncio
import base64
import io
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
    from spatialrl.agents.hf import to_pil

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
    """The server's requested wait: ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP date."""
    ms = response.headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class OpenAIPolicy:
    """Chat-completions client with bounded concurrency and retries. ``usage`` accumulates token counts."""

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
        image_format: str = "png",
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.image_format = image_format
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self.name = name or f"openai:{model}@{self.base_url}"
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0, "failures": 0}
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
            tasks = [self._one(client, semaphore, c, sampling) for c in conversations]
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

    async def _one(self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, conversation: Conversation,
                   sampling: SamplingParams) -> Generation:
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
                    response = await client.post(url, json=body)
                except httpx.TimeoutException as e:
                    last_error = f"timeout after {self.timeout}s ({type(e).__name__})"
                except httpx.TransportError as e:
                    last_error = f"connection error: {type(e).__name__}: {e}"
                else:
                    if response.status_code == 200:
                        return self._parse(response, attempts)
                    last_error = f"HTTP {response.status_code}: {response.text[:300]}"
                    if response.status_code not in RETRY_STATUS:
                        break  # 400/401/404...: retrying cannot help
                    wait = _retry_after_seconds(response)
            if attempt < self.max_retries:
                self.usage["retries"] += 1
                backoff = self._jitter.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))
                await asyncio.sleep(max(backoff, wait or 0.0))
        self.usage["failures"] += 1
        return Generation(text="", error=f"{last_error} (after {attempts} attempts)", extra={"attempts": attempts})

    def _parse(self, response: httpx.Response, attempts: int) -> Generation:
        try:
            data = response.json()
            choice = data["choices"][0]
            content = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError) as e:
            self.usage["failures"] += 1
            return Generation(text="", error=f"malformed response: {e}: {response.text[:300]}")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        usage = data.get("usage") or {}
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        self.usage["requests"] += 1
        self.usage["prompt_tokens"] += prompt_tokens or 0
        self.usage["completion_tokens"] += completion_tokens or 0
        logprobs = None
        lp = choice.get("logprobs")
        if isinstance(lp, dict) and isinstance(lp.get("content"), list):
            logprobs = [float(t["logprob"]) for t in lp["content"]]
        return Generation(text=content, logprobs=logprobs, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens,
                          extra={"attempts": attempts, "finish_reason": choice.get("finish_reason")})
