#!/usr/bin/env bash
# Download, into .whl/, the wheels of DreamGym's dependencies that the GPU device image lacks (CPython 3.12,
# manylinux x86_64), so `benchmarks/gpu_check.sh` can install them there without a network. About 27 MB: the
# MiniLM embedder (84 MB), SmolLM2 (98 MB) and ALFWorld/TextWorld do not fit the 64 MiB a device call may carry.
set -euo pipefail
cd "$(dirname "$0")/.."
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  -d .whl gymnasium==1.4.0 Farama-Notifications==0.0.6 bm25s==0.3.16 RapidFuzz==3.14.6 faiss-cpu==1.15.1 \
  gguf==0.19.0 fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 annotated-doc==0.0.7 uvicorn==0.54.0 opentelemetry-api==1.45.2 datasets==5.2.0 \
  dill==0.4.1 multiprocess==0.70.19
du -sh .whl
