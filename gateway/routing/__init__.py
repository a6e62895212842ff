"""Where each attempt goes: session keys for conversations that name none, rendezvous
hashing with bounded load over a pool's replicas, a circuit breaker per replica fed by
attempts and active probes, and the retry and first-byte rules. Pure logic and asyncio:
no HTTP here; the adapters send where the forwarder (gateway/forward.py) says."""
