"""docs/serving-environments.md's Python snippets run as written, against real dials served at the addresses they
name (each address is replaced by a server of this test's, on a free port), and OpenEnv's directory check passes on
deploy/openenv, whose `server.app` serves what `$DREAMGYM_SERVE_ENV` names."""

from __future__ import annotations

import contextlib
import importlib.util
import re
from pathlib import Path

from fastapi.testclient import TestClient
from openenv.cli._validation import validate_multi_mode_deployment

from dreamgym.envserve.server import EnvServerConfig, start_env_server
from test_docs import marked_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "serving-environments.md"
DEPLOY = ROOT / "deploy" / "openenv"


def test_the_serving_pages_snippets_run_as_written(capsys):
    blocks = [code for kind, _, code in marked_blocks(PAGE) if kind == "run"]
    assert len(blocks) == 3, "the remote TextEnv, the pool and OpenEnv's client"
    assert any("GenericEnvClient" in b and "await env.step" in b for b in blocks)  # the async client, as async
    addresses = sorted(set(re.findall(r"http://127\.0\.0\.1:\d+", "".join(blocks))))
    with contextlib.ExitStack() as stack:
        urls = {a: stack.enter_context(start_env_server(EnvServerConfig(env="dial"))).url for a in addresses}
        for code in blocks:
            for address, url in urls.items():
                code = code.replace(address, url)
            exec(compile(code, str(PAGE), "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith("dial-") and printed[-1].endswith(" False"), printed  # a task id, a real server


def test_openenv_validate_passes_on_the_environment_folder(monkeypatch):
    valid, issues = validate_multi_mode_deployment(DEPLOY)
    assert valid, issues
    assert (DEPLOY / "openenv.yaml").is_file() and (DEPLOY / "server" / "Dockerfile").is_file()
    spec = importlib.util.spec_from_file_location("openenv_server_app", DEPLOY / "server" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("DREAMGYM_SERVE_ENV", "--env dial --split test")
    with TestClient(module.app) as client:
        assert client.get("/health").json()["status"] == "healthy"
        assert client.get("/state").json()["provenance"]["split"] == "test"
