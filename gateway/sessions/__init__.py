"""Sessions: a durable record per (tenant, session id), per-session limits, context windows
and checkpoints. The life of a session reads in docs/architecture.md, "Sessions"."""
