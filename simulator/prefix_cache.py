"""A per-replica LRU of prompt blocks, modelling an inference server's prefix (KV) cache."""

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
        blocks = self._blocks
        hits = 0
        for key in keys:
            if key not in blocks:
                break
            hits += 1
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return hits

    def clear(self) -> None:
        self._blocks.clear()
