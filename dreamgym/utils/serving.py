"""Bounded HTTP serving shared by dreamgym's servers (`dreamgym serve-model`, `dreamgym webshop serve`).

Owns: the limits every server enforces (`Limits`), their enforcement, JSON error answers for everything that
can go wrong below or around a route, the bearer token of a server that has one (`TokenMiddleware`,
`presented_token`, `read_token`) and the start-up warning for a server open beyond this machine without one
(`warn_if_open`), and running a FastAPI app under uvicorn on a bound socket (`make_server`, `bind` and
`run_foreground` for a command line, `start` for a background thread in this process).
Must not know: what the servers serve, their routes or their error shapes beyond `ErrorBody`.

What a client sees (each server documents its own numbers, the defaults are below):
- a body over `max_body_bytes` is answered 413 from its Content-Length before any of it is read; a chunked body
  is counted while it streams and cut off with 413 once it passes the limit, so no request can hold more than
  the limit in memory;
- a request line plus headers over `max_header_bytes` is answered 431; any other malformed request 400;
- a body still incomplete `body_timeout_s` after its headers is answered 408; a connection that has not sent a
  complete request head within `head_timeout_s` is answered 408 (closed quietly if it sent nothing);
- a request on a connection beyond the first `max_connections` open ones is answered 503;
- unknown paths 404, wrong methods 405, invalid fields or query values 400, a failure inside a route 500.
Every one of these is JSON (`ErrorBody(status, message)`) with `Connection: close` where the request was not read
to its end. Connections not yet accepted wait in a listen backlog of `backlog` (the kernel's somaxconn caps it),
so a burst of that many new connections is queued, not refused.

The limits sit in two places because uvicorn parses the request head itself: the head time, the connection count,
a head too large to arrive whole and the lingering close in a subclass of uvicorn's h11 protocol; the head size,
body size and body time in an ASGI middleware. FastAPI's own `max_body_size` is not used: it answers some
rejections in plain text and has no time limit.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

ErrorBody = Callable[[int, str], dict[str, Any]]
"""A server's JSON error document for (HTTP status, message naming the problem)."""


@dataclass(frozen=True)
class Limits:
    """What one server accepts. The defaults suit a loopback tool serving a few dozen clients at once."""

    max_body_bytes: int = 1 << 20
    max_header_bytes: int = 32 << 10  # request line plus headers; generous for browsers' localhost cookies
    body_timeout_s: float = 30.0
    head_timeout_s: float = 30.0
    max_connections: int = 256  # open connections; each is a file descriptor and a little memory
    backlog: int = 1024  # new connections queued by the kernel before the server accepts them
    keep_alive_s: int = 5
    linger_s: float = 2.0  # after answering a request still being sent, how long its rest is read and dropped

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_header_bytes", "body_timeout_s", "head_timeout_s", "max_connections",
                     "backlog", "keep_alive_s", "linger_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")


def _error_bytes(error_body: ErrorBody, status: int, message: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The JSON error document and its headers. Connection: close because such an answer may come before the
    request was read to its end (h11 then closes the connection after it)."""
    data = bytes(JSONResponse(error_body(status, message)).body)
    return data, [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                  (b"connection", b"close")]


async def _send_error(send: Send, error_body: ErrorBody, status: int, message: str) -> None:
    data, headers = _error_bytes(error_body, status, message)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


# -- request body: size and time -------------------------------------------------------------------------------
class LimitsMiddleware:
    """Reads each request body in full, within the size and time limits, before the app sees the request.

    The app then gets the body from memory, so no route can be fed more than `max_body_bytes`, and a route's own
    body parsing never waits on a slow client."""

    def __init__(self, app: ASGIApp, limits: Limits, error_body: ErrorBody):
        self.app, self.limits, self.error_body = app, limits, error_body

    async def _reject(self, send: Send, status: int, message: str) -> None:
        await _send_error(send, self.error_body, status, message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = len(scope["method"]) + len(scope["raw_path"]) + len(scope["query_string"]) + \
            sum(len(k) + len(v) + 4 for k, v in scope["headers"])
        if head > self.limits.max_header_bytes:  # h11 enforces this only on a head that arrives in pieces
            await self._reject(send, 431, _head_too_large(self.limits))
            return
        limit = self.limits.max_body_bytes
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"0")
        if not declared.isdigit():  # h11 refuses these before we run; other servers might not
            await self._reject(send, 400, f"invalid Content-Length {declared[:40]!r}")
            return
        if int(declared) > limit:
            await self._reject(send, 413, f"the request body ({int(declared)} bytes by Content-Length) is over "
                                          f"this server's limit of {limit} bytes")
            return
        chunks: list[bytes] = []
        size, more = 0, True
        deadline = time.monotonic() + self.limits.body_timeout_s
        while more:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                await self._reject(send, 408, f"the request body did not arrive in full within "
                                              f"{self.limits.body_timeout_s:g} s ({size} bytes came)")
                return
            if message["type"] == "http.disconnect":
                return  # the client has gone: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._reject(send, 413, f"the request body passed this server's limit of {limit} bytes "
                                              "while streaming")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        chunks.clear()
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # after the body: the disconnect notice, if a route waits for one
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


# -- the bearer token ---------------------------------------------------------------------------------------------
OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the token: a load balancer's or a client pool's health check."""


def presented_token(authorization: str) -> str:
    """The token an Authorization header carries: `Bearer TOKEN`, or Basic credentials whose password is the token
    (any user name). Basic is what a stock client sends for a URL with credentials in it
    (`http://token:TOKEN@host:port`: OpenEnv's `EnvClient` connects with `websockets`, and `requests` and `httpx`
    do the same), since those clients take no headers. "" when there is none."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return ""
    return ""


def authorized(scope: Scope, token: str | None) -> bool:
    """Whether a request (HTTP or WebSocket scope) may pass: no token set, a path of `OPEN_PATHS`, or the token
    presented (compared in constant time)."""
    if not token or scope.get("path") in OPEN_PATHS:
        return True
    given = next((v for k, v in scope["headers"] if k == b"authorization"), b"").decode("latin-1")
    return hmac.compare_digest(presented_token(given).encode(), token.encode())


UNAUTHORIZED = ("this server needs Authorization: Bearer <token> (or the token as the password of the URL: "
                "http://token:<token>@host:port)")
"""What a request without the token is told (401)."""


class TokenMiddleware:
    """Every HTTP request but `OPEN_PATHS` needs the bearer token (401 in the server's error shape otherwise)."""

    def __init__(self, app: ASGIApp, token: str, error_body: ErrorBody):
        self.app, self.token, self.error_body = app, token, error_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not authorized(scope, self.token):
            data, headers = _error_bytes(self.error_body, 401, UNAUTHORIZED)
            await send({"type": "http.response.start", "status": 401,
                        "headers": [*headers, (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": data})
            return
        await self.app(scope, receive, send)


def read_token(env_var: str, token_file: str | None) -> str | None:
    """A server's bearer token: the contents of `token_file` when given, else `$env_var`, else None (no token).
    Raises ValueError naming the file when it cannot be read or is empty (a file on the command line, not the token
    itself: a command line is visible to `ps`)."""
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--token-file {token_file}: {getattr(e, 'strerror', None) or e}") from None
        if not token:
            raise ValueError(f"--token-file {token_file} is empty")
        return token
    return os.environ.get(env_var) or None


def is_loopback(host: str) -> bool:
    """Whether a bound address reaches this machine only (127.0.0.0/8, ::1); a name is resolved first."""
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
        except (OSError, ValueError):
            return False


def warn_if_open(command: str, host: str, token: str | None, env_var: str, exposes: str) -> bool:
    """Print a one-line warning on stderr when a server is bound beyond loopback (`host`, as bound) without a
    token, saying what anyone who reaches it can do (`exposes`) and how to set one. True when it warned."""
    if token or is_loopback(host):
        return False
    print(f"dreamgym {command}: warning: listening on {host} with no token: anyone who can reach this port can "
          f"{exposes}; set ${env_var} or --token-file to require one", file=sys.stderr, flush=True)
    return True


# -- request head: size, time, connection count ----------------------------------------------------------------
class _RecordingConnection(h11.Connection):
    """h11's connection, remembering why it last refused the peer (its status hint says 431 for a long head)."""

    last_error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as e:
            self.last_error = e
            raise


class _Drain(asyncio.BufferedProtocol):
    """Reads what a client still sends after its request was answered into one reused buffer, and drops it: no
    allocation per read, and nothing reaches uvicorn's parser for a request that is already over."""

    def __init__(self, owner: asyncio.Protocol):
        self._owner = owner
        self._buffer = bytearray(1 << 16)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the client has sent everything: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.connection_lost(exc)


class _LingeringTransport:
    """The connection's transport, except that closing it while the client is still sending a request first
    half-closes and reads (and drops) what is in flight for up to `Limits.linger_s`. Closing at once would make
    the kernel reset the connection over the unread bytes, and clients that send their whole body before reading
    (curl, httpx, requests) would see a reset instead of the 413 that answered them (RFC 9112 section 9.6)."""

    def __init__(self, transport: asyncio.Transport, protocol: _LimitedH11Protocol):
        self._transport, self._protocol = transport, protocol
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        t = self._transport
        if self.lingering or t.is_closing():
            return
        # After a WebSocket upgrade the connection belongs to the WebSocket protocol (h11 has no say any more): its
        # close is a plain close, so that protocol hears the connection end and leaves the server's connection set.
        upgraded = t.get_protocol() is not self._protocol
        if not upgraded and self._protocol.conn.their_state in (h11.SEND_BODY, h11.ERROR) and t.can_write_eof():
            self.lingering = True
            t.set_protocol(_Drain(self._protocol))
            t.resume_reading()  # uvicorn pauses reading while a body waits for the app
            t.write_eof()  # the answer is flushed first, then FIN
            self._protocol.loop.call_later(self._protocol.limits.linger_s, t.close)
        else:
            t.close()


class _LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with JSON answers for what it refuses, a request-head deadline, a JSON 503 past the
    connection limit (uvicorn's own answers to these are plain text; it has no head deadline) and a lingering
    close after answering a request that is still being sent."""

    limits: Limits
    error_body: ErrorBody

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._recording = _RecordingConnection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self.conn = self._recording
        self.limit_concurrency = None  # counted below instead, to answer in JSON
        self._head_timer: asyncio.TimerHandle | None = None
        inner = self.app

        async def admit(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and len(self.connections) > self.limits.max_connections:
                await _send_error(send, self.error_body, 503, "this server is at its limit of "
                                  f"{self.limits.max_connections} open connections; retry shortly")
                return
            await inner(scope, receive, send)

        self.app = admit

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _answer_and_close(self, status: int, message: str) -> None:
        data, headers = _error_bytes(self.error_body, status, message)
        try:
            for event in (h11.Response(status_code=status, headers=headers), h11.Data(data=data), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # a response is already under way on this connection: just close
            pass
        self.transport.close()

    def send_400_response(self, msg: str) -> None:  # uvicorn calls this for whatever h11 refuses
        err = self._recording.last_error
        if err is not None and err.error_status_hint == 431:
            self._answer_and_close(431, _head_too_large(self.limits))
        else:
            self._answer_and_close(400, f"malformed HTTP request: {err or msg}")

    # The head deadline runs from the connection's start, and again from the end of each response.
    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:
            self._answer_and_close(408, f"the request line and headers did not arrive within "
                                        f"{self.limits.head_timeout_s:g} s")
        else:
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a whole request head has arrived (or the peer erred)
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()


def _head_too_large(limits: Limits) -> str:
    return f"the request line and headers are over this server's limit of {limits.max_header_bytes} bytes"


# -- errors from routing and routes -----------------------------------------------------------------------------
def validation_message(errors: Sequence[Any], drop: int = 1) -> str:
    """'field: problem; ...' for pydantic's errors; `drop` leading parts of each location are left out (FastAPI's
    say where the field was: 'body', 'query')."""
    msg = "; ".join(f"{'.'.join(str(x) for x in err['loc'][drop:])}: {err['msg']}" for err in errors)
    return msg or "invalid request"


def install(app: FastAPI, limits: Limits, error_body: ErrorBody, *, token: str | None = None) -> None:
    """Give `app` the body limits and JSON answers for unknown paths, wrong methods, invalid fields and failures,
    and with `token` the bearer token on every request but `OPEN_PATHS` (checked before the body is read).

    A server may register its own handlers for its own exception types; these cover everything else. The limits
    are kept on the app for `make_server`."""
    app.state.serving = (limits, error_body)
    app.add_middleware(LimitsMiddleware, limits=limits, error_body=error_body)
    if token:  # added last, so it runs first: a request without the token costs no body read
        app.add_middleware(TokenMiddleware, token=token, error_body=error_body)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = str(e.detail)
        if e.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):  # routing's own
            message = f"{request.method} {request.url.path}: {message}"
        return JSONResponse(error_body(e.status_code, message), status_code=e.status_code, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, validation_message(e.errors())), status_code=400)

    @app.exception_handler(Exception)
    async def _failed(_: Request, e: Exception) -> JSONResponse:  # logged by uvicorn with its traceback
        return JSONResponse(error_body(500, f"internal error: {type(e).__name__}: {e}"), status_code=500)


# -- running ------------------------------------------------------------------------------------------------------
def bind(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket; `port=0` picks a free one. Listening at once means connections made before the event
    loop starts wait in the backlog instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def make_server(app: FastAPI, *, log_level: str = "warning", access_log: bool = False) -> uvicorn.Server:
    """A uvicorn server for `app` enforcing the limits `install` gave it. Run it with
    `srv.run(sockets=[bind(...)])` in the foreground (it stops on SIGINT/SIGTERM) or with `start`."""
    limits, error_body = app.state.serving
    chosen_limits, chosen_body = limits, error_body

    class Protocol(_LimitedH11Protocol):
        limits = chosen_limits
        error_body = staticmethod(chosen_body)  # a plain function here would be bound to the protocol

    config = uvicorn.Config(app, http=Protocol, backlog=limits.backlog, timeout_keep_alive=limits.keep_alive_s,
                            h11_max_incomplete_event_size=limits.max_header_bytes, timeout_graceful_shutdown=5,
                            log_level=log_level, access_log=access_log)
    return uvicorn.Server(config)


def run_foreground(srv: uvicorn.Server, sock: socket.socket) -> None:
    """Run `srv` (from `make_server`) on the bound `sock` in this thread until SIGINT/SIGTERM, Ctrl-C ending it
    quietly, then close the socket: the body of every serving command."""
    try:
        srv.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


class RunningServer:
    """A server on a background thread of this process; `base` is its root URL (no trailing slash)."""

    def __init__(self, srv: uvicorn.Server, thread: threading.Thread, host: str, port: int):
        self._server, self._thread = srv, thread
        self.host, self.port = host, port
        self.base = f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start(srv: uvicorn.Server, host: str = "127.0.0.1", port: int = 0) -> RunningServer:
    """Run `srv` on a background thread; `port=0` picks a free port. Returns once it accepts requests."""
    sock = bind(host, port, srv.config.backlog)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, name=f"serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            srv.should_exit = True
            sock.close()
            raise RuntimeError(f"server on {host}:{port} failed to start")
        time.sleep(0.01)
    return RunningServer(srv, thread, host, port)
