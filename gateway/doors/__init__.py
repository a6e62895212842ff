"""The client APIs the gateway serves, each a translator at the edge (base.py)."""
