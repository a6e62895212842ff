"""Tollgate's core: what a request is and what happens to it. It imports no HTTP client,
no Redis and no policy-engine client; those live in `adapters` behind `gateway.ports`."""
