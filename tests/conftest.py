import os

# Every test runs offline: nothing may reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One BLAS/OpenMP thread per test process: the models under test are tiny, and on a loaded 2-core machine extra
# threads spin instead of working (measured 10-150x slower generation with 2 threads under load).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests where torch sees no CUDA device (CI, this CPU machine); torch is only imported when
    such a test was collected."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run by benchmarks/gpu_check.sh)")
    for item in gpu:
        item.add_marker(skip)
