"""Metering: prices, budgets (reserve, then settle), rate limits, idempotency and the spend
ledger, through the `StateStore` port. See docs/architecture.md, "Metering"."""
