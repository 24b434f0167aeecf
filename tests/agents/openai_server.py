"""A real OpenAI-compatible chat server on loopback (FastAPI + uvicorn in a thread) with injected faults.

Behaviour is keyed by markers in the last user text, counted per conversation (``id=<name>``):
``[429xN]`` answers 429 with ``Retry-After: 1`` for the first N attempts, ``[500xN]`` 500 for the first
N, ``[slowxN]`` sleeps ``slow_seconds`` on the first N, ``[always500]`` never succeeds, ``[400]`` is a
client error. A success answers ``id=<name> images=<WxH,...>`` (decoded from the data URLs with PIL)
and usage ``prompt_tokens = words in the request``, ``completion_tokens = words in the answer``.

Misbehaving 200 answers (issue 23): ``[msgstr]`` message is a string, ``[contentint]`` / ``[contentdict]``
content is an int / a dict, ``[usagestr]`` usage is a string, ``[usagecountstr]`` its counts are strings,
``[lpnolp]`` logprobs entries lack ``logprob`` (``[logprobs]``: well-formed ones), ``[notjson]`` a text
body, ``[jsonlist]`` a JSON list, ``[nochoices]`` an empty choice list, ``[choicestr]`` a string choice,
``[huge]`` a 2 MB answer whatever ``max_tokens`` says, ``[trickle]`` sends its body one byte every 0.2 s
(never idle long enough for a read timeout); ``[ra3600]`` is a 429 with ``Retry-After: 3600``.
``always`` (a string of markers) applies to every request, for tests whose prompts cannot carry them.
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
import threading
import time
from collections import defaultdict
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from PIL import Image


class FaultyServer:
    def __init__(self, slow_seconds: float = 1.0, work_seconds: float = 0.0, always: str = ""):
        self.slow_seconds = slow_seconds
        self.always = always
        self.work_seconds = work_seconds
        self.attempts: dict[str, int] = defaultdict(int)
        self.in_flight = 0
        self.max_in_flight = 0
        self.served: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    async def chat(self, request: Request):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._chat(request)
        finally:
            self.in_flight -= 1

    async def _chat(self, request: Request):
        body = await request.json()
        self.auth.append(request.headers.get("authorization"))
        texts, sizes = [], []
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, str):
                texts.append(content)
                continue
            for part in content:
                if part["type"] == "text":
                    texts.append(part["text"])
                elif part["type"] == "image_url":
                    url = part["image_url"]["url"]
                    match = re.fullmatch(r"data:image/(png|jpeg);base64,([A-Za-z0-9+/=]+)", url)
                    if not match:
                        return JSONResponse({"error": {"message": "bad image url"}}, status_code=400)
                    image = Image.open(io.BytesIO(base64.b64decode(match.group(2), validate=True)))
                    sizes.append(f"{image.width}x{image.height}")
        key = (re.search(r"id=(\w+)", texts[-1]) or re.search(r"(.*)", texts[-1])).group(1)
        last = texts[-1] + self.always
        self.attempts[key] += 1
        n = self.attempts[key]

        def first(tag: str) -> bool:
            m = re.search(rf"\[{tag}x(\d+)\]", last)
            return bool(m) and n <= int(m.group(1))

        if "[400]" in last:
            return JSONResponse({"error": {"message": "bad request"}}, status_code=400)
        if "[always500]" in last:
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)
        if "[ra3600]" in last:
            return JSONResponse({"error": {"message": "come back in an hour"}}, status_code=429,
                                headers={"Retry-After": "3600"})
        if first("429"):
            return JSONResponse({"error": {"message": "rate limited"}}, status_code=429, headers={"Retry-After": "1"})
        if first("500"):
            return JSONResponse({"error": {"message": "internal"}}, status_code=500)
        if first("slow"):
            await asyncio.sleep(self.slow_seconds)
        if self.work_seconds:
            await asyncio.sleep(self.work_seconds)
        answer = f"id={key} images={','.join(sizes)}"
        if "[huge]" in last:
            answer += " " + "Action: MoveAhead. " * 105_000  # ~2 MB
        usage: Any = {"prompt_tokens": sum(len(t.split()) for t in texts), "completion_tokens": len(answer.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self.served.append({"key": key, "body": body, "time": time.monotonic()})
        message: Any = {"role": "assistant", "content": answer}
        choice: Any = {"index": 0, "message": message, "finish_reason": "stop"}
        if "[logprobs]" in last or "[lpnolp]" in last:
            entry = {"token": "x"} if "[lpnolp]" in last else {"token": "x", "logprob": -0.5}
            choice["logprobs"] = {"content": [dict(entry) for _ in answer.split()]}
        if "[msgstr]" in last:
            choice["message"] = answer
        if "[contentint]" in last:
            message["content"] = 7
        if "[contentdict]" in last:
            message["content"] = {"text": answer}
        if "[usagestr]" in last:
            usage = "many"
        if "[usagecountstr]" in last:
            usage = {"prompt_tokens": "12", "completion_tokens": "lots"}
        if "[trickle]" in last:
            async def drip():
                for _ in range(30):
                    await asyncio.sleep(0.2)
                    yield b" "
                yield b"{}"

            return StreamingResponse(drip(), media_type="application/json")
        if "[notjson]" in last:
            return PlainTextResponse("oops, not JSON")
        if "[jsonlist]" in last:
            return JSONResponse([answer])
        choices: Any = [choice]
        if "[nochoices]" in last:
            choices = []
        if "[choicestr]" in last:
            choices = [answer]
        return {"id": f"chatcmpl-{key}-{n}", "object": "chat.completion", "model": body["model"],
                "choices": choices, "usage": usage}

    def __enter__(self) -> FaultyServer:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)
