"""The experience replay buffer: real and synthetic transitions kept, embedded and retrieved.

Owns, one concept per module:

- `embed`: embedders (MiniLM offline, hashing; +action keys) and the on-disk vector cache;
- `vector_index`: exact top-k cosine search (numpy or faiss) and MMR selection, the same on every CPU;
- `buffer`: `ReplayBuffer`, persistent and deduplicated, top-k / MMR retrieval of similar transitions.

Must not know: models, trainers, the experience model's prompt, any concrete environment; torch is never imported.
"""
