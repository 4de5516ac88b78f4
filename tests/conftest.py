import os

import pytest

# Every test runs offline: nothing may reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One BLAS/OpenMP thread per test process: the models under test are tiny, and on a loaded 2-core machine extra
# threads spin instead of working (measured 10-150x slower generation with 2 threads under load).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_preset():
    """The tiny preset (random-init weights, its tokenizer), loaded once; copy the model before changing it."""
    import torch

    from dreamgym.llm.presets import load_preset

    torch.set_num_threads(1)
    return load_preset("tiny", device="cpu")


@pytest.fixture(scope="session")
def warm_preset():
    """The warm-started dial policy (`model_fixtures.WARM_RECIPE`, shipped in tests/fixtures/models/dial-warm) and
    its tokenizer, loaded once; copy the model before changing it."""
    import torch
    from model_fixtures import warm_model_dir

    from dreamgym.llm.presets import load_preset

    torch.set_num_threads(1)
    return load_preset(str(warm_model_dir()), device="cpu")


@pytest.fixture
def warm_backend(warm_preset):
    """A fresh HFBackend over a copy of the warm-started policy (trainers change the weights in place)."""
    import copy

    from dreamgym.llm.hf import HFBackend

    model, tok = warm_preset
    return HFBackend(copy.deepcopy(model), tok, batch_size=128)


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests where torch sees no CUDA device (CI, this CPU machine); torch is only imported when
    such a test was collected."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run by benchmarks/gpu_check.sh)")
    for item in gpu:
        item.add_marker(skip)
