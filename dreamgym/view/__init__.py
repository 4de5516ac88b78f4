"""`dreamgym view`: a local web page of runs, their curves and results, and episodes beside their dreams.

Owns, one concept per module (each imports only the ones listed before it):

- `episodes`: episodes of a trajectory file (JSONL, Parquet) or a dream's replay buffer, a page at a time;
- `runs`: what a run folder holds, read leniently (problems are kept, never raised), and which files may be read;
- `charts`: line charts as inline SVG;
- `states`: a state as text with the differences to another marked, a WebShop state as the shop's own page;
- `replay`: real beside dream per step (a real episode replayed in an experience model, a dream in reality);
- `site`: the pages, rendered from `templates/` for the server and the export alike;
- `server`: the routes on `dreamgym.utils.serving`; `export`: the static export; `command`: the command line.

Must not know: trainers; how the experience model predicts (it is used through `ExperienceModel`).
"""
