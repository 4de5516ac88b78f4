"""Test helpers for HTTP servers: start a `dreamgym` serving command, or vLLM's OpenAI server from its own virtualenv,
on a free loopback port, and speak raw HTTP/1.1 over a socket where a client library would hide what the server did
(resets, early answers).

Must not know: any server's routes or limits; the tests say what they expect.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
import contextlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def server_process(cmd: list[str], timeout: float = 120.0,
                   env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run `cmd` from the checkout (it must print the loopback URL it serves) and yield (process, base URL without a
    trailing slash or /v1). `env` adds variables to this process's environment (PYTHONPATH is the checkout unless
    `env` says otherwise). The process is stopped on exit. Its log goes to a temporary file, not a pipe nobody
    reads (a full pipe would stall the server)."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        try:
            deadline = time.time() + timeout
            line = ""
            assert proc.stdout is not None
            while time.time() < deadline and not line:
                ready, _, _ = select.select([proc.stdout], [], [], 1.0)
                if ready:
                    line = proc.stdout.readline()
                if proc.poll() is not None:
                    break
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if not m:
                log.seek(0)
                raise AssertionError(f"server did not start: {line!r} {log.read()[-2000:]}")
            yield proc, f"http://127.0.0.1:{m.group(1)}"
        finally:
            stop(proc, grace=15)


def stop(proc: subprocess.Popen, grace: float) -> None:
    """Terminate a server process, killing it when it outlives `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_healthy(proc: subprocess.Popen, url: str, log: IO[str], what: str, timeout: float, interval: float) -> None:
    """Poll `url` every `interval` s until it answers 200; a process that exits or stays unready for `timeout` s fails
    with the end of its `log`."""
    import httpx

    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None or time.time() > deadline:
            why = f"exit {proc.returncode}" if proc.returncode is not None else f"not ready in {timeout:.0f} s"
            log.seek(0)
            raise AssertionError(f"{what} did not start ({why}): {log.read()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(interval)


def cli_server(args: list[str], timeout: float = 120.0,
               env: dict[str, str] | None = None) -> contextlib.AbstractContextManager[tuple[subprocess.Popen, str]]:
    """`server_process` of `python -m dreamgym.cli *args` (a serving command, which prints the URL it serves)."""
    return server_process([sys.executable, "-m", "dreamgym.cli", *args], timeout, env)


VLLM_PYTHON = Path(os.environ.get("DREAMGYM_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
"""vLLM's interpreter: `bash run.sh vllm` (and `run.sh test`) builds this virtualenv; DREAMGYM_VLLM_PYTHON overrides."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def vllm_server(model_dir: str | Path, name: str, *, lora: bool = True, max_lora_rank: int = 16,
                dtype: str = "float32", max_model_len: int = 2048, max_num_batched_tokens: int = 16384,
                kv_cache_gib: int = 1, timeout: float = 1800.0,
                extra: tuple[str, ...] = ()) -> Iterator[tuple[subprocess.Popen, str]]:
    """vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`: the `vllm` script of the CPU wheel
    fails on missing distribution metadata) over `model_dir`, served as `name`, with prefix caching, and with LoRA
    and runtime adapter loading when `lora`. Yields (process, base URL with /v1) once `/health` answers 200; the
    server is stopped on exit. A server that exits or stays unready fails with the end of its log.
    `max_num_batched_tokens` above the prompts of a batch: on the CPU build a seeded request whose prefill is split
    over two steps stops the engine (`CPU Generator does not use offset`, docs/models-and-hardware.md)."""
    port = free_port()
    cmd = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
           "--max-model-len", str(max_model_len), "--max-num-batched-tokens", str(max_num_batched_tokens),
           "--enable-prefix-caching", "--seed", "0", *extra]
    if lora:
        cmd += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", "4"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)  # vLLM's venv imports nothing from this checkout
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(proc, url + "/health", log, "vLLM", timeout, interval=1.0)
            yield proc, url + "/v1"
        finally:
            stop(proc, grace=30)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def rss_mib(pid: int) -> float:
    """Resident memory of a server process, in MiB (Linux's /proc)."""
    with open(f"/proc/{pid}/status") as f:
        kib = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), None)
    if kib is None:
        raise RuntimeError(f"no VmRSS for process {pid}")
    return kib / 1024


def parse_answer(data: bytes) -> Answer:
    """One HTTP/1.1 response from the bytes a server sent (up to its Content-Length)."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, f"no complete HTTP answer: {data[:300]!r}"
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    n = int(headers.get("content-length", len(rest)))
    return Answer(status, headers, rest[:n])


def read_answer(sock: socket.socket, timeout: float = 30.0) -> Answer:
    """Read until the server closes or a whole answer has come; fails on a reset before any answer."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            if not data:
                raise
            break
        if not chunk:
            break
        data += chunk
        head, sep, rest = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        if sep and m and len(rest) >= int(m.group(1)):
            break
    return parse_answer(data)


def connect(base: str) -> socket.socket:
    host, port = base.split("//", 1)[1].split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def raw(base: str, data: bytes, timeout: float = 30.0) -> Answer:
    """Send `data` as is on a new connection and read the answer."""
    with connect(base) as s:
        s.sendall(data)
        return read_answer(s, timeout)


class DropField:
    """ASGI middleware that removes one JSON field from every request body (`app.add_middleware(DropField,
    name=...)`): the app then behaves as a server that accepts the field and ignores it (a chat server without
    structured output, say)."""

    def __init__(self, app: Any, name: str):
        self.app, self.name = app, name

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if body:
            data = json.loads(body)
            data.pop(self.name, None)
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)
