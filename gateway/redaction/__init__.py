"""Redaction: sensitive data never leaves, never comes back unmasked, never reaches a log.

    entities.py  the kinds (patterns, validators, groups)   checks.py   the validators
    prefilter.py Hyperscan: where an entity may be          detector.py exact matches, whole or streamed
    window.py    the sliding window for streams             tokens.py   placeholders and their vault
    request.py   every text a request carries               guard.py    the response guard
    settings.py  per-tenant settings from config            state.py    per-request state, counters
    scrub.py     the one function for everything persisted
    seen.py      what was found in long texts seen before (a conversation's history)

Import from the modules; this package file stays empty so that `gateway.config` can read
the kind names without loading the matchers.
"""
