"""The `dreamgym` commands that are more than a call into the library: each module is one command (its config, its
arguments, its report), built on the packages below it; nothing in the library imports a command.

- `collect`: offline real trajectories from a family's scripted policies;
- `check_family`: a family checked against its contract from the command line;
- `train`: `TrainConfig` and `dreamgym train` (every algorithm, every mode);
- `recipe`: several rows on one environment, the quickstart, the results table's rendering;
- `recorded`: the recorded runs of the quickstart's defaults and the text printed from them;
- `table`: `dreamgym table`, the paper's Table 1 shape with ablations and learning curves;
- `seeds`: a recipe over several seeds (`--seeds`, `--workers`) and its report over seeds;
- `row_hash`: what a recipe row's figures depend on, hashed (a finished row with an equal hash is read back);
- `docs_ref`: docs/reference/ written from the code.
"""
