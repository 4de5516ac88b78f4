"""What reaches a served environment: the token on every request, the WebSocket messages OpenEnv's session loop
can take, and the error bodies answered instead.

Owns: `Guard` (the ASGI wrapper: the bearer token or Basic password on every request but `OPEN_PATHS`, by the rule
every server shares (`dreamgym.utils.serving.authorized`), WebSocket handshakes included; a size limit on WebSocket
messages, unusable messages answered with an OpenEnv error naming the problem while the session goes on, a client that
leaves mid-step logged in one line), `message_problem`, and `error_body` (FastAPI's and OpenEnv's error shape).
Must not know: environments, families, the experience model, the routes the app serves (`dreamgym.envserve.server`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The token rule is the one every server shares; its names stay importable from here.
from dreamgym.utils.serving import OPEN_PATHS, UNAUTHORIZED, authorized, presented_token  # noqa: F401

log = logging.getLogger(__name__)


ERROR_TYPES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 409: "conflict", 413: "too_large",
               422: "validation_error", 429: "too_many_requests", 500: "internal_error", 503: "unavailable"}
"""The `type` of an error that is not a validation error, by status (FastAPI's validation errors bring their own)."""


def error_body(status: int, message: str, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """FastAPI's (and so OpenEnv's) error shape: `detail` a list of {type, loc, msg} (a request's validation errors
    as FastAPI lists them, else one entry), plus the status and the problem in one line (`message`)."""
    detail = errors if errors is not None else [{"type": ERROR_TYPES.get(status, "http_error"), "loc": [],
                                                 "msg": message}]
    return {"detail": detail, "message": message, "status": status}


def message_problem(message: Message) -> tuple[str, str] | None:
    """Why a WebSocket message cannot be a session message, as (OpenEnv error code, words), or None when OpenEnv
    can take it. OpenEnv's session loop ends the session (SESSION_ERROR, connection closed) on each of these, so they
    are answered here and never passed on: a binary frame, text that is JSON but not an object, JSON nested deeper
    than the parser goes, and strings holding a lone surrogate (valid JSON escapes, but not Unicode text: the answer
    that echoes one cannot be encoded). Text that is not JSON at all is left to OpenEnv, which answers it in place."""
    text = message.get("text")
    if text is None:
        return "INVALID_JSON", ("a binary frame; send each message as a JSON text frame, such as "
                                '{"type": "step", "data": {"action": "..."}}')
    try:
        value = json.loads(text)
    except RecursionError:
        return "INVALID_JSON", "the message is JSON nested too deeply"
    except ValueError:
        return None
    if not isinstance(value, dict):
        kind = "JSON null" if value is None else {list: "a JSON array", str: "a JSON string",
                                                  bool: "a JSON boolean"}.get(type(value), "a JSON number")
        return "VALIDATION_ERROR", ('a message must be a JSON object such as {"type": "step", "data": {"action": '
                                    f'"..."}}}}, got {kind}')
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return "VALIDATION_ERROR", (f"the message holds a lone surrogate ({e.object[e.start:e.end]!a}) in a string, "
                                    "which is not Unicode text")
    return None


class Guard:
    """The bearer token on every request (but `OPEN_PATHS`), a size limit on WebSocket messages, and the messages
    OpenEnv's session loop cannot take (`message_problem`).

    An oversized or unusable message is not passed on: the session gets an OpenEnv error message naming the problem
    and stays open. (uvicorn's own `ws_max_size`, set well above, closes the connection for anything larger still.)
    A client that leaves while its step is computed is logged in one line: the step's answer is dropped instead of
    failing inside OpenEnv's loop (whose error answer would fail the same way, ending in an ASGI traceback)."""

    def __init__(self, app: ASGIApp, token: str | None, max_message_bytes: int):
        self.app, self.token, self.max_message_bytes = app, token, max_message_bytes

    def _authorized(self, scope: Scope) -> bool:
        return authorized(scope, self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            data = json.dumps(error_body(401, UNAUTHORIZED)).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(data)).encode()), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": data})
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await receive()  # the connect event
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
            return
        if scope.get("path") != "/ws":  # OpenEnv's WS /mcp, say (see create_env_app)
            await receive()  # the connect event
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": 4404,
                        "reason": f"no WebSocket route {scope.get('path')}; sessions are at /ws"})
            return
        limit = self.max_message_bytes
        gone = False

        async def error(code: str, text: str) -> None:
            await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": {
                "code": code, "message": text}})})

        async def checked() -> Message:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                size = len(message.get("text") or "") + len(message.get("bytes") or b"")
                if size > limit:
                    await error("MESSAGE_TOO_LARGE", f"the message ({size} bytes) is over this server's limit of "
                                                     f"{limit} bytes; it was dropped")
                    continue
                problem = message_problem(message)
                if problem is None:
                    return message
                await error(problem[0], f"{problem[1]}; it was dropped")

        async def quiet(message: Message) -> None:
            nonlocal gone
            if gone:
                return
            try:
                await send(message)
            except OSError:  # the client has gone (uvicorn's ClientDisconnected is an OSError)
                gone = True
                if message["type"] != "websocket.close":  # OpenEnv closes after "close": nothing to say then
                    client = scope.get("client") or ("?", "?")
                    log.info("serve-env: the client %s:%s left during a step; its answer was dropped and its session "
                             "closed", client[0], client[1])

        await self.app(scope, checked, quiet)
