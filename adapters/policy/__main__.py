"""`python -m adapters.policy ENTRYPOINT`: check the policy source on stdin in this (child)
process and print the report; see adapters.policy.check."""

from __future__ import annotations

import sys

from adapters.policy.check import child_main

raise SystemExit(child_main(sys.argv[1]))
