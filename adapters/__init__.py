"""The outside world, one module per thing outside, each behind a port of gateway.ports."""
