"""Keys managed at runtime: stored (hashes only) in the state store, served from a local,
revocation-aware cache, changed through /admin/keys and `tollgate keys`."""
