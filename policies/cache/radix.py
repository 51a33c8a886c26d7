"""`radix`: a page-aligned compressed radix tree with LRU eviction of unlocked leaves."""

from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from twinserve.core.config import scheduler_default
from twinserve.policies.cache.base import MatchResult, PrefixCache
from twinserve.policies.registries import CACHE


class _Node:
    """An edge of the tree: a run of whole pages (``key`` holds their tokens)."""

    __slots__ = ("children", "parent", "key", "pages", "ref", "last", "alive")

    def __init__(self, parent: "_Node | None", key: np.ndarray, pages: list[int], last: int) -> None:
        self.children: dict[bytes, _Node] = {}
        self.parent = parent
        self.key = key
        self.pages = pages
        self.ref = 0
        self.last = last
        self.alive = True


@CACHE.register("radix")
class RadixCache(PrefixCache):
    """A radix tree whose edges are runs of full pages, keyed by their first page's tokens.

    Matching compares whole edges with one vectorised comparison, so a long shared prefix costs a
    few dictionary lookups. An edge is split at a page boundary when a match or insert diverges
    inside it. Invariants: a node's ``ref`` counts the locks on it and on its descendants, so a
    locked node and its ancestors are never evicted; only unlocked leaves are evicted, the least
    recently used first (recency is a logical clock, so runs are deterministic), and a leaf may be
    trimmed page by page from its end; ``evictable_pages`` is the number of pages in unlocked
    nodes and ``num_pages`` the number of pages in the tree.
    """

    def __init__(self, page_size: int = scheduler_default("page_size")) -> None:
        super().__init__(page_size)
        self._root = _Node(None, np.empty(0, dtype=np.int32), [], 0)
        self._tick = 0
        self._seq = 0
        self._count = 0
        self._evictable = 0
        self._leaves = 0
        self._heap: list[tuple[int, int, _Node]] = []

    # ---- walking --------------------------------------------------------------------------
    def _split(self, node: _Node, k: int) -> _Node:
        """Cut ``node`` after its first ``k`` pages; returns the new upper node."""
        ps = self.page_size
        parent = node.parent
        assert parent is not None
        upper = _Node(parent, node.key[: k * ps], node.pages[:k], node.last)
        upper.ref = node.ref
        node.key = node.key[k * ps:]
        node.pages = node.pages[k:]
        node.parent = upper
        upper.children[node.key[:ps].tobytes()] = node
        parent.children[upper.key[:ps].tobytes()] = upper
        return upper

    def _walk(self, tokens: np.ndarray, split: bool, touch: bool) -> tuple[_Node, list[int], int]:
        """Longest cached page-aligned prefix: (deepest node, its pages, tokens matched)."""
        ps = self.page_size
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        limit = (len(tokens) // ps) * ps
        node = self._root
        pages: list[int] = []
        pos = 0
        tick = self._tick
        while pos < limit:
            child = node.children.get(tokens[pos : pos + ps].tobytes())
            if child is None:
                break
            klen = len(child.key)
            m = min(klen, limit - pos)
            diff = np.flatnonzero(child.key[:m] != tokens[pos : pos + m])
            same = (int(diff[0]) if diff.size else m) // ps  # whole pages equal (>= 1)
            if touch:
                child.last = tick
            if same * ps < klen:
                if not split:
                    pages.extend(child.pages[:same])
                    pos += same * ps
                    break
                child = self._split(child, same)
            pages.extend(child.pages)
            node = child
            pos += same * ps
            if same * ps < m:
                break
        return node, pages, pos

    def match(self, tokens: np.ndarray) -> MatchResult:
        self._tick += 1
        node, pages, n = self._walk(tokens, split=True, touch=True)
        if not pages:
            return MatchResult(None, [], 0)
        return MatchResult(node, pages, n)

    def match_len(self, tokens: np.ndarray) -> int:
        return self._walk(tokens, split=False, touch=False)[2]

    # ---- insertion ------------------------------------------------------------------------
    def insert(self, tokens: np.ndarray, pages: list[int]) -> MatchResult:
        ps = self.page_size
        n = len(tokens) // ps
        if n != len(pages) or len(tokens) != n * ps:
            raise ValueError(f"insert: {len(tokens)} tokens need whole pages, got {len(pages)} pages")
        self._tick += 1
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        node, tree_pages, pos = self._walk(tokens, split=True, touch=True)
        if pos < n * ps:
            k = pos // ps
            leaf = _Node(node, tokens[pos:].copy(), list(pages[k:]), self._tick)
            if node is not self._root and not node.children:
                self._leaves -= 1
            node.children[tokens[pos : pos + ps].tobytes()] = leaf
            self._leaves += 1
            added = n - k
            self._count += added
            self._evictable += added
            self.stats.inserted_pages += added
            tree_pages = tree_pages + leaf.pages
            node = leaf
            self._push(leaf)
        if node is self._root:
            return MatchResult(None, [], 0)
        return MatchResult(node, tree_pages, n * ps)

    def distinct_path_pages(self, nodes: Sequence[Any]) -> int:
        """Walks up from each node until a node already counted (each node once)."""
        seen: set[_Node] = {self._root}  # the root holds no pages; every walk ends there
        add = seen.add
        total = 0
        for nd in nodes:
            while nd not in seen:
                add(nd)
                total += len(nd.pages)
                nd = nd.parent
        return total

    # ---- locking --------------------------------------------------------------------------
    def lock(self, node: Any) -> None:
        while node is not None and node is not self._root:
            node.ref += 1
            if node.ref == 1:
                self._evictable -= len(node.pages)
            node = node.parent

    def unlock(self, node: Any) -> None:
        first = node
        while node is not None and node is not self._root:
            node.ref -= 1
            if node.ref < 0:
                raise AssertionError("radix cache: unlock without lock")
            if node.ref == 0:
                self._evictable += len(node.pages)
            node = node.parent
        if first is not None and first is not self._root and first.ref == 0 and not first.children:
            self._push(first)

    def is_locked(self, node: Any) -> bool:
        return node is None or node.ref > 0

    # ---- eviction -------------------------------------------------------------------------
    def _push(self, node: _Node) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (node.last, self._seq, node))
        if len(self._heap) > 4 * self._leaves + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        heap: list[tuple[int, int, _Node]] = []
        stack = list(self._root.children.values())
        while stack:
            nd = stack.pop()
            stack.extend(nd.children.values())
            if not nd.children and nd.ref == 0:
                self._seq += 1
                heap.append((nd.last, self._seq, nd))
        heapq.heapify(heap)
        self._heap = heap

    def evict(self, n: int) -> list[int]:
        ps = self.page_size
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
            take = min(n - len(freed), len(node.pages))
            freed.extend(node.pages[len(node.pages) - take:])
            self._count -= take
            self._evictable -= take
            if take < len(node.pages):  # trim the leaf's tail; it stays a candidate
                node.pages = node.pages[: len(node.pages) - take]
                node.key = node.key[: len(node.pages) * ps]
                self._seq += 1
                heapq.heappush(heap, (node.last, self._seq, node))
                continue
            parent = node.parent
            del parent.children[node.key[:ps].tobytes()]
            node.alive = False
            self._leaves -= 1
            if parent is not self._root and not parent.children:
                self._leaves += 1
                if parent.ref == 0:
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
            out.extend(nd.pages)
            stack.extend(nd.children.values())
        return out

    def path_pages(self, node: Any) -> list[int]:
        runs: list[list[int]] = []
        while node is not None and node is not self._root:
            if not node.alive:
                raise AssertionError("radix cache: a request's prefix node was evicted")
            runs.append(node.pages)
            node = node.parent
        return [p for run in reversed(runs) for p in run]

    def check(self) -> None:
        """Recount pages, locks and leaves from scratch (tests)."""
        ps = self.page_size
        count = unlocked = leaves = 0
        stack = list(self._root.children.items())
        while stack:
            key, nd = stack.pop()
            if len(nd.pages) < 1 or len(nd.key) != len(nd.pages) * ps or key != nd.key[:ps].tobytes():
                raise AssertionError("radix cache: malformed edge")
            count += len(nd.pages)
            unlocked += len(nd.pages) if nd.ref == 0 else 0
            leaves += not nd.children
            for k, c in nd.children.items():
                if c.ref > nd.ref or c.parent is not nd:
                    raise AssertionError("radix cache: child locked more than its parent, or orphaned")
                stack.append((k, c))
        if (count, unlocked, leaves) != (self._count, self._evictable, self._leaves):
            raise AssertionError(f"radix cache counts drifted: pages {count}/{self._count}, "
                                 f"unlocked {unlocked}/{self._evictable}, leaves {leaves}/{self._leaves}")
