"""The documentation is executable: the config files in `configs/` load with their commands' config classes, the
worked example of `docs/custom-environment.md` and the README's Python example run, and the generated references
in `docs/reference/` match the code.

A config file names the command it is for on a comment line (`dreamgym <command> [--resume] --config <its path>`);
it is loaded with that command's config class through the same building and validation pass `load_config` runs,
less the checks of the files it names (those are other runs' outputs, made by the configs and data commands that
`docs/results/` lists, and do not exist in a fresh clone).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = ROOT / "configs" / "accelerate"
"""accelerate's own config files (`accelerate launch --config_file`), not DreamGym configs."""
CONFIGS = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if ACCELERATE not in p.parents)
COMMAND_LINE = re.compile(r"^#.*\bdreamgym ([\w-]+) (?:--resume )?(?:--[\w-]+ \S+ )*--config (\S+)", re.M)


def config_classes() -> dict[str, type]:
    """The config class each command that takes `--config` builds."""
    from dreamgym.envserve.server import EnvServerConfig
    from dreamgym.rl.evaluate import EvalConfig
    from dreamgym.experience.train import TrainEMConfig
    from dreamgym.commands.recipe import QuickstartConfig
    from dreamgym.commands.table import TableConfig
    from dreamgym.commands.train import TrainConfig

    return {"quickstart": QuickstartConfig, "table": TableConfig, "train": TrainConfig, "train-em": TrainEMConfig,
            "eval": EvalConfig, "serve-env": EnvServerConfig}


def command_of(path: Path) -> str:
    """The command a config file says it is for (the comment line that runs it by its own path)."""
    rel = path.relative_to(ROOT).as_posix()
    found = [cmd for cmd, where in COMMAND_LINE.findall(path.read_text(encoding="utf-8")) if where == rel]
    assert found, f"{rel}: no comment line `dreamgym <command> --config {rel}`"
    assert len(set(found)) == 1, f"{rel}: names several commands {sorted(set(found))}"
    return found[0]


def load_without_file_checks(cls: type, path: Path):
    """`load_config(cls, path)` less the checks of the files and folders the config names."""
    from dreamgym import config

    cfg = config._build(cls, config.read_yaml_mapping(path))
    config._walk(cfg, "", files=False)
    return cfg


def test_there_are_configs_for_every_environment():
    assert {p.parent.name for p in CONFIGS} >= {"dial", "webshop", "alfworld"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "configs").as_posix())
def test_every_config_loads_with_its_commands_config_class(path):
    """A stale key (a field renamed or removed), a wrong type, a value out of range or a broken rule across fields
    fails here with the ConfigError the command would print."""
    from dreamgym.envs import family_names

    cls = config_classes()[command_of(path)]
    cfg = load_without_file_checks(cls, path)
    assert getattr(cfg, "env", "dial") in family_names()


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_the_accelerate_configs_load_with_accelerate(name):
    """configs/accelerate/*.yaml are read by accelerate's own loader; the FSDP one asks for FSDP2 by layer, the
    scheme `dreamgym.utils.fsdp` implements, and its comment names the flag that turns DreamGym's sharding on."""
    from accelerate.commands.config.config_args import load_config_from_file

    path = ACCELERATE / f"{name}.yaml"
    cfg = load_config_from_file(str(path))
    assert cfg.distributed_type.value == {"ddp": "MULTI_GPU", "fsdp": "FSDP"}[name] and cfg.num_processes > 1
    assert f"--config_file configs/accelerate/{name}.yaml -m dreamgym.cli train" in path.read_text()
    if name == "fsdp":
        assert cfg.fsdp_config["fsdp_version"] == 2 and cfg.fsdp_config["fsdp_reshard_after_forward"] is True
        assert cfg.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert "model.fsdp=true" in path.read_text()


def _inputs(cfg) -> list[str]:
    """Paths under runs/ that a config reads (its file-checked fields, nested ones included)."""
    import dataclasses

    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _inputs(value)
        elif "check" in f.metadata and isinstance(value, str) and value.startswith("runs/"):
            out.append(value)
    return out


def test_every_run_a_config_reads_is_made_by_another_config_or_a_documented_data_command():
    """From a fresh clone the configs run in order: each input under runs/ is another config's output folder (its
    `run_dir`, `run_dir/final` or `out`), or a file a command in docs/results/ writes (`--out FILE`, `> FILE`)."""
    made: set[str] = set()
    loaded = []
    for path in CONFIGS:
        cfg = load_without_file_checks(config_classes()[command_of(path)], path)
        loaded.append((path, cfg))
        for name in ("run_dir", "out"):
            folder = getattr(cfg, name, "")
            if folder:
                made |= {folder, f"{folder}/final"}
    results = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "results").glob("*.md"))
    made |= set(re.findall(r"(?:--out|>)\s+(runs/\S+?\.jsonl)", results))
    for path, cfg in loaded:
        missing = [i for i in _inputs(cfg) if i not in made]
        assert not missing, f"{path.relative_to(ROOT)} reads {missing}, which no config or documented command makes"


# ------------------------------------------------------------------------------------------- generated references
def test_the_generated_references_match_the_code():
    """docs/reference/cli.md and config.md are `python -m dreamgym.commands.docs_ref`'s output for the code as it is: a
    command, option, config field, default, range or field doc changed without regenerating them fails here."""
    # A fresh process: families other tests register in this one would show up among the allowed values.
    run = subprocess.run([sys.executable, "-m", "dreamgym.commands.docs_ref", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr


def test_the_reference_check_sees_a_changed_field(monkeypatch):
    """The freshness check is not vacuous: a config field's doc that changes makes config.md stale."""
    from dreamgym import config
    from dreamgym.commands import docs_ref

    real = config.field_docs

    def changed(cls):
        docs = real(cls)
        return {k: v + " (changed)" if k == "em_steps" else v for k, v in docs.items()}

    monkeypatch.setattr(config, "field_docs", changed)
    assert "config.md" in [p.name for p in docs_ref.stale()]


# ------------------------------------------------------------------------------------- docs/custom-environment.md
MARKED_BLOCK = re.compile(r"<!-- docs-test: ([\w-]+)(?: (\S+))? -->\n```\w*\n(.*?)```", re.S)


def marked_blocks(page: Path) -> list[tuple[str, str, str]]:
    """(kind, argument, code) of each fenced block a `<!-- docs-test: KIND [ARG] -->` line marks, in page order."""
    return MARKED_BLOCK.findall(page.read_text(encoding="utf-8"))


def _run(cmd: list[str], cwd: Path, *paths: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, paths)]), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_the_custom_environment_guide_runs_as_written(tmp_path):
    """The guide's worked example, block by block: its files are written as a package outside DreamGym, the code
    before the entry-point block runs with `register_family()` (registration, `check_family`, collected
    episodes), and the code after it runs with the package declared in the `dreamgym.envs` entry-point group as
    `pip install` would declare it (Python, then the `dreamgym` command line)."""
    blocks = marked_blocks(ROOT / "docs" / "custom-environment.md")
    kinds = [k for k, _, _ in blocks]
    assert kinds.count("write") >= 2 and "entry-points" in kinds and "run" in kinds and "shell" in kinds, kinds
    pkg, site, work = tmp_path / "pkg", tmp_path / "site", tmp_path / "work"
    work.mkdir()
    installed = False
    for kind, arg, code in blocks:
        if kind == "write":
            (pkg / arg).parent.mkdir(parents=True, exist_ok=True)
            (pkg / arg).write_text(code, encoding="utf-8")
        elif kind == "entry-points":
            group, _, entries = code.partition("\n")
            assert group.strip() == '[project.entry-points."dreamgym.envs"]'
            info = site / "counterpkg-0.1.dist-info"
            info.mkdir(parents=True)
            (info / "METADATA").write_text("Metadata-Version: 2.1\nName: counterpkg\nVersion: 0.1\n")
            names = {k.strip(): v.strip().strip('"') for k, _, v in
                     (line.partition("=") for line in entries.splitlines() if line.strip())}
            (info / "entry_points.txt").write_text("[dreamgym.envs]\n" + "".join(f"{k} = {v}\n" for k, v in names.items()))
            installed = True
        elif kind == "run":
            paths = (pkg, site) if installed else (pkg,)
            run = _run([sys.executable, "-c", code], work, *paths)
            assert run.returncode == 0, f"block failed:\n{code}\n{run.stdout}\n{run.stderr}"
        elif kind == "shell":
            assert installed, "the command-line block needs the entry point"
            for line in code.strip().splitlines():
                words = line.split()
                assert words[0] == "dreamgym", line
                run = _run([sys.executable, "-m", "dreamgym.cli", *words[1:]], work, pkg, site)
                assert run.returncode == 0, f"{line}\n{run.stdout}\n{run.stderr}"
        else:
            raise AssertionError(f"unknown docs-test block kind {kind!r}")
    assert (work / "runs" / "counter" / "offline.jsonl").is_file() and (work / "runs" / "counter" / "cli.jsonl").is_file()


# ------------------------------------------------------------------------------------------------------ README
def test_the_readme_python_example_runs(tmp_path):
    """The README's Python API example, as printed there: offline data, an experience model, one dream GRPO
    iteration (zero real steps) and a real evaluation (about half a minute on one CPU core)."""
    blocks = [code for kind, _, code in marked_blocks(ROOT / "README.md") if kind == "run"]
    assert len(blocks) == 1
    run = _run([sys.executable, "-c", blocks[0]], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "real steps spent in RL: 0;" in run.stdout
    assert (tmp_path / "runs" / "api" / "em").is_dir()


def test_the_readme_is_for_users():
    """The README stays a user's page: at most 250 lines, the experiment log lives in docs/log/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert not re.search(r"^### \d+\. ", text, flags=re.M), "a numbered experiment section is back in the README"


def test_every_relative_link_in_the_readme_and_docs_points_at_a_file():
    """Pages move (the experiment log left the README): a link to a page or file that is not there fails here."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_no_page_names_a_machine_specific_absolute_path():
    """A command a reader copies must run on their machine: paths are relative to the repository (or $PWD), never a
    folder of the machine a page was written on (docs/log/commands.md named one)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for page in pages
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"(?<![\w.$}])/(?:work|home|Users|root)/\w", line)]
    assert not found, found
