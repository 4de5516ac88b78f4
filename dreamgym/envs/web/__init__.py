"""Web environment families in a real browser through BrowserGym: MiniWoB++ (local pages, runs everywhere) and
WebArena-Lite (the paper's benchmark, on its self-hosted sites).

Owns: nothing itself; the families are the modules `miniwob` and `webarena` (registered by `dreamgym.envs`).
Must not know: models, torch, trainers.

Modules: browser (Chromium processes, one worker thread each, the pool; crashes and hangs as `BrowserFailure`),
axtree (the pruned accessibility-tree state and the actions it offers), actions (BrowserGym's high-level action
set, parsed and carried out), env (`WebEnv`, a `TextEnv` over a `WebTaskSource`), explain (reasoning traces,
`noop_state`), miniwob_tasks / miniwob_policies / miniwob (the MiniWoB++ family), evaluators / webarena_tasks /
webarena (the WebArena-Lite family).
"""
