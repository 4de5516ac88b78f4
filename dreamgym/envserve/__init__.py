"""Serving environment families, real or dreamed, over OpenEnv's protocol, and the clients that use them.

Owns nothing itself; its modules: `protocol` (the typed action, observation and state models and the JSON form of
a step's info), `gather` (concurrent sessions' steps gathered into one batched step), `server` (`dreamgym
serve-env`: the OpenEnv app, limits, token, the replay buffer's single owner), `client` (`RemoteTextEnv`, a
`TextEnv` over a served session; `RemoteBuffer`) and `pool` (several servers behind one client: round-robin,
health checks, failover).
Must not know: trainers, how the experience model runs.
"""
