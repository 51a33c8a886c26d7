"""`radix`: a page-granular radix tree with LRU eviction of unlocked leaves."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from twinserve.policies.cache.base import MatchResult, PrefixCache
from twinserve.policies.registries import CACHE


class _Node:
    """One cached page: its tokens (as bytes, the edge key from the parent) and page id."""

    __slots__ = ("children", "parent", "key", "page", "ref", "last", "alive")

    def __init__(self, parent: "_Node | None", key: bytes, page: int, last: int) -> None:
        self.children: dict[bytes, _Node] = {}
        self.parent = parent
        self.key = key
        self.page = page
        self.ref = 0
        self.last = last
        self.alive = True


@CACHE.register("radix")
class RadixCache(PrefixCache):
    """A trie whose every node is one full page of tokens.

    Invariants: a node's ``ref`` counts the locks on it and on its descendants, so a locked node
    and its ancestors are never evicted; only leaves with ``ref == 0`` are evicted, the least
    recently matched first (recency is a logical clock, so runs are deterministic);
    ``evictable_pages`` equals the number of nodes with ``ref == 0``.
    """

    def __init__(self, page_size: int = 16) -> None:
        super().__init__(page_size)
        self._root = _Node(None, b"", -1, 0)
        self._tick = 0
        self._seq = 0
        self._count = 0
        self._evictable = 0
        self._heap: list[tuple[int, int, _Node]] = []

    # ---- lookup ---------------------------------------------------------------------------
    def _keys(self, tokens: np.ndarray) -> tuple[bytes, int, int]:
        ps = self.page_size
        n = len(tokens) // ps
        buf = np.ascontiguousarray(tokens[: n * ps], dtype=np.int32).tobytes()
        return buf, n, ps * 4

    def match(self, tokens: np.ndarray) -> MatchResult:
        buf, n, step = self._keys(tokens)
        self._tick += 1
        tick = self._tick
        node = self._root
        pages: list[int] = []
        for off in range(0, n * step, step):
            child = node.children.get(buf[off : off + step])
            if child is None:
                break
            child.last = tick
            pages.append(child.page)
            node = child
        if not pages:
            return MatchResult(None, [], 0)
        return MatchResult(node, pages, len(pages) * self.page_size)

    def match_len(self, tokens: np.ndarray) -> int:
        buf, n, step = self._keys(tokens)
        node = self._root
        depth = 0
        for off in range(0, n * step, step):
            node = node.children.get(buf[off : off + step])  # type: ignore[assignment]
            if node is None:
                break
            depth += 1
        return depth * self.page_size

    # ---- insertion ------------------------------------------------------------------------
    def insert(self, tokens: np.ndarray, pages: list[int]) -> MatchResult:
        buf, n, step = self._keys(tokens)
        if n != len(pages):
            raise ValueError(f"insert: {len(tokens)} tokens need {len(tokens) // self.page_size} pages, got {len(pages)}")
        self._tick += 1
        tick = self._tick
        node = self._root
        out: list[int] = []
        for i in range(n):
            key = buf[i * step : (i + 1) * step]
            child = node.children.get(key)
            if child is None:
                child = _Node(node, key, pages[i], tick)
                node.children[key] = child
                self._count += 1
                self._evictable += 1
                self.stats.inserted_pages += 1
            else:
                child.last = tick
            out.append(child.page)
            node = child
        if n and not node.children and node.ref == 0:
            self._push(node)
        return MatchResult(node if n else None, out, n * self.page_size)

    # ---- locking --------------------------------------------------------------------------
    def lock(self, node: Any) -> None:
        while node is not None and node is not self._root:
            node.ref += 1
            if node.ref == 1:
                self._evictable -= 1
            node = node.parent

    def unlock(self, node: Any) -> None:
        first = node
        while node is not None and node is not self._root:
            node.ref -= 1
            if node.ref < 0:
                raise AssertionError("radix cache: unlock without lock")
            if node.ref == 0:
                self._evictable += 1
            node = node.parent
        if first is not None and first is not self._root and first.ref == 0 and not first.children:
            self._push(first)

    def is_locked(self, node: Any) -> bool:
        return node is None or node.ref > 0

    # ---- eviction -------------------------------------------------------------------------
    def _push(self, node: _Node) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (node.last, self._seq, node))
        if len(self._heap) > 4 * self._count + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._heap = []
        stack = [self._root]
        while stack:
            nd = stack.pop()
            stack.extend(nd.children.values())
            if nd is not self._root and not nd.children and nd.ref == 0:
                self._seq += 1
                self._heap.append((nd.last, self._seq, nd))
        heapq.heapify(self._heap)

    def evict(self, n: int) -> list[int]:
        freed: list[int] = []
        heap = self._heap
        while len(freed) < n and heap:
            last, _, node = heapq.heappop(heap)
            if not node.alive or node.children or node.ref > 0:
                continue
            if last != node.last:
                self._seq += 1
                heapq.heappush(heap, (node.last, self._seq, node))
                continue
            parent = node.parent
            del parent.children[node.key]
            node.alive = False
            freed.append(node.page)
            self._count -= 1
            self._evictable -= 1
            if parent is not self._root and not parent.children and parent.ref == 0:
                self._push(parent)
        self.stats.evicted_pages += len(freed)
        return freed

    # ---- sizes and checks -----------------------------------------------------------------
    @property
    def num_pages(self) -> int:
        return self._count

    @property
    def evictable_pages(self) -> int:
        return self._evictable

    def all_pages(self) -> list[int]:
        out: list[int] = []
        stack = list(self._root.children.values())
        while stack:
            nd = stack.pop()
            out.append(nd.page)
            stack.extend(nd.children.values())
        return out

    def path_pages(self, node: Any) -> list[int]:
        out: list[int] = []
        while node is not None and node is not self._root:
            if not node.alive:
                raise AssertionError("radix cache: a request's prefix node was evicted")
            out.append(node.page)
            node = node.parent
        return out[::-1]

    def check(self) -> None:
        """Recount refs and evictable pages from scratch (tests)."""
        unlocked = 0
        stack = list(self._root.children.values())
        count = 0
        while stack:
            nd = stack.pop()
            count += 1
            unlocked += nd.ref == 0
            for c in nd.children.values():
                if c.ref > nd.ref:
                    raise AssertionError("radix cache: child locked more than its parent")
                stack.append(c)
        if count != self._count or unlocked != self._evictable:
            raise AssertionError(f"radix cache counts drifted: {count}/{self._count}, {unlocked}/{self._evictable}")
