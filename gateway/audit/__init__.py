"""The decision log: versioned records, hash-chained so that an edited, removed or reordered
record is detected (`tollgate audit verify`), queued off the request path and written by a
sink adapter (adapters/audit/)."""
