"""Deterministic synthetic token ids from a counter-based hash (no RNG object per request).

A prompt of a trace request is made on demand at its arrival, so making it must be cheap: one
vectorised SplitMix64 pass over ``n`` counters costs about 10 µs for 1k tokens, where creating a
seeded ``numpy.random.Generator`` per request alone costs twice that. Every function here is pure:
the same arguments give the same ids on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB

_U_GOLDEN = np.uint64(_GOLDEN)
_U_M1 = np.uint64(_M1)
_U_M2 = np.uint64(_M2)
_S27, _S30, _S31, _S32 = (np.uint64(s) for s in (27, 30, 31, 32))

# Domains keep the streams of one (seed, id) apart: a prompt never equals its own answer.
PROMPT = 1
OUTPUT = 2
BLOCK = 3
SESSION = 4


def _mix_int(x: int) -> int:
    """SplitMix64 finaliser on a Python int (64-bit wrap-around)."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def derive_key(*parts: int) -> int:
    """One 64-bit key from a tuple of integers (order matters; negative values are allowed)."""
    h = 0x243F6A8885A308D3
    for p in parts:
        h = _mix_int(h + _GOLDEN + (int(p) & _MASK))
    return h


def _mix_inplace(x: np.ndarray) -> np.ndarray:
    x ^= x >> _S30
    x *= _U_M1
    x ^= x >> _S27
    x *= _U_M2
    x ^= x >> _S31
    return x


def _to_vocab(x: np.ndarray, vocab_size: int) -> np.ndarray:
    """Map uniform 64-bit words onto [0, vocab_size) by multiply-high (bias below 2**-32 * v)."""
    x >>= _S32
    x *= np.uint64(vocab_size)
    x >>= _S32
    return x.astype(np.int32)


def random_tokens(key: int, n: int, vocab_size: int, start: int = 0) -> np.ndarray:
    """Tokens ``start .. start+n-1`` of the endless pseudo-random stream named by ``key``.

    ``random_tokens(k, a+b, v)[a:] == random_tokens(k, b, v, start=a)``: a stream can be cut
    anywhere and continued.
    """
    x = np.arange(start, start + n, dtype=np.uint64)
    x *= _U_GOLDEN
    x += np.uint64(key & _MASK)
    return _to_vocab(_mix_inplace(x), vocab_size)


def block_tokens(salt: int, hash_ids: Sequence[int], n: int, block_size: int,
                 vocab_size: int) -> np.ndarray:
    """The first ``n`` tokens of the blocks named by ``hash_ids``; ``n`` must not exceed
    ``len(hash_ids) * block_size``.

    Block ``i`` holds ``block_size`` tokens that depend only on ``(salt, hash_ids[i])``, so equal
    hash ids give identical blocks wherever they appear.
    """
    nblocks = -(-n // block_size)
    hk = np.fromiter(hash_ids[:nblocks], dtype=np.int64, count=nblocks).astype(np.uint64)
    hk *= _U_GOLDEN
    hk += np.uint64(derive_key(salt, BLOCK) & _MASK)
    _mix_inplace(hk)
    offs = np.arange(block_size, dtype=np.uint64)
    offs *= _U_GOLDEN
    x = (hk[:, None] + offs[None, :]).reshape(-1)[:n]
    return _to_vocab(_mix_inplace(x), vocab_size)


class TokenMaker:
    """The token functions above with a workload's constants precomputed (same ids, faster).

    ``unique(domain, rid, n, start)`` equals ``random_tokens(derive_key(seed, rid, domain), n,
    vocab_size, start)`` and ``blocks(hash_ids, n)`` equals ``block_tokens(seed, hash_ids, n,
    block_size, vocab_size)``; the counter table covers ``max_len`` positions (longer requests
    fall back to computing their counters). Holds no state that changes after construction.
    """

    __slots__ = ("seed", "vocab_size", "block_size", "_ctr", "_offs", "_bkey")

    def __init__(self, seed: int, vocab_size: int, block_size: int, max_len: int) -> None:
        self.seed, self.vocab_size, self.block_size = seed, vocab_size, block_size
        self._ctr = np.arange(max(max_len, 0), dtype=np.uint64)
        self._ctr *= _U_GOLDEN
        self._offs = np.arange(block_size, dtype=np.uint64)
        self._offs *= _U_GOLDEN
        self._bkey = np.uint64(derive_key(seed, BLOCK) & _MASK)

    def unique(self, domain: int, rid: int, n: int, start: int = 0) -> np.ndarray:
        key = np.uint64(derive_key(self.seed, rid, domain))
        if start + n <= self._ctr.size:
            x = self._ctr[start:start + n] + key
        else:
            x = np.arange(start, start + n, dtype=np.uint64)
            x *= _U_GOLDEN
            x += key
        return _to_vocab(_mix_inplace(x), self.vocab_size)

    def blocks(self, hash_ids: Sequence[int], n: int) -> np.ndarray:
        nblocks = -(-n // self.block_size)
        hk = np.fromiter(hash_ids[:nblocks], dtype=np.int64, count=nblocks).astype(np.uint64)
        hk *= _U_GOLDEN
        hk += self._bkey
        _mix_inplace(hk)
        x = (hk[:, None] + self._offs[None, :]).reshape(-1)[:n]
        return _to_vocab(_mix_inplace(x), self.vocab_size)
