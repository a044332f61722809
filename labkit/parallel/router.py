"""A small router in front of N OpenAI-API replicas (notebook 16): round-robin, or prefix-aware.

`start_router(urls, policy)` serves, from a background thread of this process, the same web stack as
labkit's server (FastAPI on uvicorn): POST /v1/chat/completions and /v1/completions are forwarded, streamed
or not, byte for byte, to one replica; GET /v1/models to the first live one; GET /health answers itself.

- "round-robin": replica 0, 1, ..., N-1, 0, ... in the order requests arrive.
- "prefix": the prompt's text (chat messages rendered as `<role>content</role>`, or the completion's
  prompt) is cut into blocks of BLOCK_CHARS characters and chain-hashed as the engine hashes its token
  blocks (each hash covers the block and every block before it). The router remembers which replicas it
  sent each hash to, and sends a request to the replica that holds its longest run of leading blocks,
  among those not busier than the least busy by more than `max_imbalance` in-flight requests; ties, and
  prompts no replica holds, go to the least busy. It hashes characters, not tokens (it has no tokenizer):
  a proxy for the token blocks the replica caches, and it forgets nothing a replica evicts.

A replica's own answer passes through with its status and body (its errors keep its OpenAI shape). A
replica that cannot be reached gives the client a 502 in OpenAI's error shape naming it, and is skipped
for `retry_s` seconds while the others keep serving. `router.routes` records where each request went.

    >>> with start_server() as a, start_server() as b, start_router([a.url, b.url], "prefix") as router:
    ...     client = openai.OpenAI(base_url=router.url + "/v1", api_key="none")
    ...     client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}])
    >>> router.routes
    [Route(path='/v1/chat/completions', replica=0, status=200, matched_blocks=0)]
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from starlette.requests import Request  # at the top: FastAPI reads the routes' annotations by name

from labkit.core.arguments import check_int, check_seconds
from labkit.core.doors import check_items

POLICIES = ("round-robin", "prefix")
BLOCK_CHARS = 64  # characters per hashed block of a prompt's text (SmolLM2: about 16 tokens of English)
MAX_HASHES = 200_000  # remembered block hashes (the oldest forgotten first)
START_TIMEOUT_S = 10.0
FORWARDED = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True)
class Route:
    """One request the router forwarded: where, what came back, and how much of its prompt it found."""

    path: str
    replica: int  # index into the router's urls
    status: int  # the replica's HTTP status; 502 when it could not be reached
    matched_blocks: int  # leading text blocks the chosen replica was known to hold (0 for round-robin)


def prompt_text(path: str, body: object) -> str:
    """The text a request's prompt starts with: chat messages rendered `<role>content</role>`, or the prompt.

    >>> prompt_text("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
    '<user>Hi</user>'
    """
    if not isinstance(body, dict):
        return ""
    if path == "/v1/completions":
        prompt = body.get("prompt", "")
        return prompt if isinstance(prompt, str) else json.dumps(prompt)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    parts = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            parts.append(f"<{message.get('role')}>{text}</{message.get('role')}>")
    return "".join(parts)


def block_hashes(text: str, block_chars: int = BLOCK_CHARS) -> list[int]:
    """Chain hashes of text's full blocks of block_chars characters: hash i covers blocks 0..i.

    >>> len(block_hashes("a" * 130, 64))
    2
    """
    hashes, previous = [], -1
    for start in range(0, len(text) - block_chars + 1, block_chars):
        previous = hash((previous, text[start : start + block_chars]))
        hashes.append(previous)
    return hashes


class RoutingTable:
    """Which replicas the router sent each block hash to, and the policy's choice of replica."""

    def __init__(self, n: int, policy: str, max_imbalance: int):
        self.n, self.policy, self.max_imbalance = n, policy, max_imbalance
        self.holders: OrderedDict[int, set[int]] = OrderedDict()  # block hash -> replicas sent it
        self.next = 0  # round-robin's next replica
        self.in_flight = [0] * n
        self.down_until = [0.0] * n  # time.monotonic() before which a replica is skipped

    def live(self) -> list[int]:
        now = time.monotonic()
        alive = [i for i in range(self.n) if self.down_until[i] <= now]
        return alive or list(range(self.n))  # every replica down: try them anyway

    def choose(self, hashes: Sequence[int]) -> tuple[int, int]:
        """(replica, leading blocks it holds) for a prompt with these block hashes."""
        live = self.live()
        if self.policy == "round-robin":
            while self.next % self.n not in live:
                self.next += 1
            replica, self.next = self.next % self.n, self.next + 1
            return replica, 0
        least = min(self.in_flight[i] for i in live)
        eligible = [i for i in live if self.in_flight[i] <= least + self.max_imbalance]
        matched = {i: self.matched(i, hashes) for i in eligible}
        replica = max(eligible, key=lambda i: (matched[i], -self.in_flight[i], -((i - self.next) % self.n)))
        self.next = replica + 1
        return replica, matched[replica]

    def matched(self, replica: int, hashes: Sequence[int]) -> int:
        count = 0
        for chain_hash in hashes:
            if replica not in self.holders.get(chain_hash, ()):
                break
            count += 1
        return count

    def remember(self, replica: int, hashes: Sequence[int]) -> None:
        for chain_hash in hashes:
            self.holders.setdefault(chain_hash, set()).add(replica)
            self.holders.move_to_end(chain_hash)
        while len(self.holders) > MAX_HASHES:
            self.holders.popitem(last=False)


def openai_error(status: int, message: str) -> dict:
    """OpenAI's error body, as labkit's server and vLLM write it."""
    kind = {502: "BadGatewayError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


@dataclass
class Upstream:
    """What the router's routes share: the replicas, the table, the record, and one HTTP client."""

    urls: list[str]
    table: RoutingTable
    routes: list[Route]
    retry_s: float
    http: httpx.AsyncClient | None = None  # made inside the server's event loop (the lifespan)

    def unreachable(self, replica: int, path: str, matched: int, error: Exception):
        """The 502 for a replica that could not be reached, which is then skipped for retry_s."""
        from starlette.responses import JSONResponse

        self.table.down_until[replica] = time.monotonic() + self.retry_s
        self.routes.append(Route(path, replica, 502, matched))
        message = (
            f"Replica {replica} ({self.urls[replica]}) could not be reached: {type(error).__name__}. "
            f"The router skips it for {self.retry_s:g} s and sends later requests to the others."
        )
        return JSONResponse(openai_error(502, message), status_code=502)


async def forward(upstream: Upstream, request: Request, path: str):
    """Send one request to the replica the table chooses; its answer streamed back as it comes."""
    from starlette.responses import StreamingResponse

    table, raw = upstream.table, await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None  # the replica answers the client's malformed body in its own words
    hashes = block_hashes(prompt_text(path, body)) if table.policy == "prefix" else []
    replica, matched = table.choose(hashes)
    table.remember(replica, hashes)
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
    outgoing = upstream.http.build_request(
        "POST", upstream.urls[replica] + path, content=raw, headers=headers
    )
    table.in_flight[replica] += 1
    try:
        answer = await upstream.http.send(outgoing, stream=True)
    except httpx.TransportError as error:
        table.in_flight[replica] -= 1
        return upstream.unreachable(replica, path, matched, error)
    upstream.routes.append(Route(path, replica, answer.status_code, matched))

    async def relay():
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        finally:
            await answer.aclose()
            table.in_flight[replica] -= 1

    kept = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "cache-control")}
    return StreamingResponse(relay(), status_code=answer.status_code, headers=kept)


def build_router_app(upstream: Upstream):
    """The router's FastAPI app: FORWARDED paths go to the replica its table chooses (module doc)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from starlette.responses import JSONResponse, Response

    @asynccontextmanager
    async def lifespan(app):
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=5.0), limits=limits) as http:
            upstream.http = http
            yield

    app = FastAPI(title="labkit router", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    table, urls = upstream.table, upstream.urls

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await forward(upstream, request, "/v1/chat/completions")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward(upstream, request, "/v1/completions")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        replica = table.live()[0]
        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        try:
            answer = await upstream.http.get(urls[replica] + "/v1/models", headers=headers)
        except httpx.TransportError as error:
            return upstream.unreachable(replica, "/v1/models", 0, error)
        return Response(answer.content, answer.status_code, media_type="application/json")

    @app.get("/health")
    async def health() -> JSONResponse:
        now = time.monotonic()
        replicas = [
            {"url": url, "up": table.down_until[i] <= now, "in_flight": table.in_flight[i]}
            for i, url in enumerate(urls)
        ]
        return JSONResponse({"status": "ok", "policy": table.policy, "replicas": replicas})

    return app


class Router:
    """A running router: its `url`, `routes` (one `Route` per forwarded request) and `stop()`."""

    def __init__(self, upstream: Upstream, server, thread: threading.Thread, url: str):
        self.urls, self.table, self.routes = upstream.urls, upstream.table, upstream.routes
        self.server, self.thread, self.url = server, thread, url

    @property
    def policy(self) -> str:
        return self.table.policy

    def per_replica(self) -> list[int]:
        """Requests forwarded to each replica, in the order of `urls`."""
        return [sum(route.replica == i for route in self.routes) for i in range(len(self.urls))]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving, close its connections, and free its port (waits for the thread)."""
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_router(
    urls: Sequence[str],
    policy: str = "prefix",
    port: int = 0,
    max_imbalance: int = 1,
    retry_s: float = 5.0,
) -> Router:
    """Serve a router in front of `urls` (replicas' base URLs) on 127.0.0.1:port (0: a free one), from a
    background thread of this process; return it once /health answers. policy: "round-robin" or "prefix"
    (module doc); max_imbalance: in-flight requests a replica may carry beyond the least busy and still be
    chosen for its prefix; retry_s: seconds a replica that could not be reached is skipped.

        >>> with start_router([a.url, b.url], "round-robin") as router:
        ...     httpx.get(router.url + "/health").json()["policy"]
        'round-robin'
    """
    import uvicorn

    from labkit.launcher import require_free_port

    check_items("urls", urls, "replica base URLs such as 'http://127.0.0.1:8000'", of=str)
    if not urls or not all(url.startswith(("http://", "https://")) for url in urls):
        raise ValueError(f"urls must be one or more 'http://host:port' base URLs, got {list(urls)!r}.")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}.")
    check_int("max_imbalance", max_imbalance, minimum=0)
    check_seconds("retry_s", retry_s)
    port = require_free_port("127.0.0.1", port)
    urls = [url.rstrip("/") for url in urls]
    upstream = Upstream(urls, RoutingTable(len(urls), policy, max_imbalance), [], retry_s)
    app = build_router_app(upstream)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="labkit-router", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"The router did not start on port {port} within {START_TIMEOUT_S:g} s.")
        time.sleep(0.01)
    return Router(upstream, server, thread, f"http://127.0.0.1:{port}")
