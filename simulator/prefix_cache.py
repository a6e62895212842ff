"""A per-replica LRU of prompt blocks, modelling an inference server's prefix (KV) cache.

As in vLLM's automatic prefix caching and SGLang's radix cache: the capacity is the
replica's, shared by every conversation it serves; a finished request leaves the blocks of
its whole sequence cached (the prompt and the tokens it generated, `insert`); and of one
sequence the tail blocks are evicted before the head (vLLM frees a request's blocks tail
first into its LRU queue, SGLang evicts leaves first), so the prefix that later turns share
outlives the text after it.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """LRU set of block keys (see ``tokens.block_keys``) with a capacity in blocks."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup_and_insert(self, keys: list[int]) -> int:
        """Return how many leading blocks were already cached, then cache all of ``keys``."""
        hits = 0
        for key in keys:
            if key not in self._blocks:
                break
            hits += 1
        self.insert(keys)
        return hits

    def insert(self, keys: list[int]) -> None:
        """Cache ``keys`` (one sequence's blocks, head first) as the most recently used, the
        head most recent of all: under pressure the sequence loses its tail first."""
        blocks = self._blocks
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
