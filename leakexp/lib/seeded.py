"""Seeded draws keyed by strings, for one key or a million at once, with the same numbers either way.

``stable_rng(*parts)`` seeds numpy's default generator (PCG64 through a SeedSequence) with the first 8 bytes of
the SHA-256 of ``parts``; building one generator per training query costs ~15 µs, most of the negative sampling
of a large training set. :func:`draw_two` gives, for many seeds at once, exactly what
``g = np.random.default_rng(seed); g.integers(n1), g.integers(n2)`` gives for each: numpy's SeedSequence mixing,
PCG64's seeding and first output (XSL-RR, 128-bit state in two 64-bit halves) and its bounded 32-bit draws
(Lemire's method, the second draw taking the buffered upper half of the first output) written over arrays. The
rare seeds whose draw needs a rejection (probability ~ n / 2**32) are drawn by numpy itself, one at a time, and
a first call checks the arrays against numpy (a future numpy that changed its streams falls back to numpy for
every seed, with a warning)."""

from __future__ import annotations

import hashlib
import logging
from typing import Iterable

import numpy as np

log = logging.getLogger(__name__)


def stable_rng(*parts) -> np.random.Generator:
    """A generator seeded by a stable hash of ``parts`` (independent of PYTHONHASHSEED and call order)."""
    return np.random.default_rng(stable_seed(":".join(map(str, parts))))


def stable_seed(key: str) -> int:
    """The seed :func:`stable_rng` gives ``np.random.default_rng`` for ``":".join(parts) == key``."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


def stable_seeds(keys: Iterable[str]) -> np.ndarray:
    """:func:`stable_seed` of each key, as uint64 (one SHA-256 per key, in C; nothing else per key)."""
    sha = hashlib.sha256
    raw = b"".join([sha(k.encode()).digest()[:8] for k in keys])
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


# numpy/random/bit_generator.pyx (SeedSequence) constants
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_M32 = 0xFFFFFFFF
# numpy/random/src/pcg64/pcg64.h: PCG_DEFAULT_MULTIPLIER_128
_PCG_HI, _PCG_LO = np.uint64(2549297995355413924), np.uint64(4865540595714422341)
_U32, _U64_32, _U64_63, _U64_58 = np.uint32(16), np.uint64(32), np.uint64(63), np.uint64(58)
_LOW = np.uint64(_M32)


def _hashmix(value: np.ndarray, h: int) -> tuple[np.ndarray, int]:
    value = value ^ np.uint32(h)
    h = (h * _MULT_A) & _M32
    value = value * np.uint32(h)
    return value ^ (value >> _U32), h


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
    return r ^ (r >> _U32)


def _seed_state(seeds: np.ndarray) -> list[np.ndarray]:
    """SeedSequence(seed).generate_state(4, uint64) per seed: four uint64 arrays."""
    words = [(seeds & _LOW).astype(np.uint32), (seeds >> _U64_32).astype(np.uint32)]
    # a seed below 2**32 is one entropy word, padded with hashmix(0): the same as a zero upper word
    zero = np.zeros(len(seeds), dtype=np.uint32)
    pool, h = [], _INIT_A
    for i in range(4):
        v, h = _hashmix(words[i] if i < 2 else zero, h)
        pool.append(v)
    for src in range(4):
        for dst in range(4):
            if src != dst:
                v, h = _hashmix(pool[src], h)
                pool[dst] = _mix(pool[dst], v)
    out32, h = [], _INIT_B
    for i in range(8):
        v = pool[i % 4] ^ np.uint32(h)
        h = (h * _MULT_B) & _M32
        v = v * np.uint32(h)
        out32.append(v ^ (v >> _U32))
    return [out32[2 * j].astype(np.uint64) | (out32[2 * j + 1].astype(np.uint64) << _U64_32) for j in range(4)]


def _mulhi(a: np.ndarray, b: np.uint64) -> np.ndarray:
    a_lo, a_hi, b_lo, b_hi = a & _LOW, a >> _U64_32, b & _LOW, b >> _U64_32
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> _U64_32) + (lh & _LOW) + (hl & _LOW)
    return hh + (lh >> _U64_32) + (hl >> _U64_32) + (mid >> _U64_32)


def _step(hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """state * PCG_DEFAULT_MULTIPLIER_128 + inc, mod 2**128."""
    new_hi = _mulhi(lo, _PCG_LO) + lo * _PCG_HI + hi * _PCG_LO
    new_lo = lo * _PCG_LO
    out_lo = new_lo + inc_lo
    return new_hi + inc_hi + (out_lo < new_lo).astype(np.uint64), out_lo


def first_output(seeds: np.ndarray) -> np.ndarray:
    """The first 64-bit output of ``np.random.default_rng(seed)`` (PCG64) for each uint64 seed."""
    with np.errstate(over="ignore"):
        s_hi, s_lo, i_hi, i_lo = _seed_state(np.asarray(seeds, dtype=np.uint64))
        inc_hi = (i_hi << np.uint64(1)) | (i_lo >> _U64_63)
        inc_lo = (i_lo << np.uint64(1)) | np.uint64(1)
        # pcg_setseq_128_srandom_r: state = 0; step; state += initstate; step
        lo = inc_lo + s_lo
        hi = inc_hi + s_hi + (lo < inc_lo).astype(np.uint64)
        hi, lo = _step(hi, lo, inc_hi, inc_lo)
        hi, lo = _step(hi, lo, inc_hi, inc_lo)  # the output's own step
        x = hi ^ lo
        r = hi >> _U64_58
        return (x >> r) | (x << ((np.uint64(64) - r) & _U64_63))


def _lemire(u: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy's buffered_bounded_lemire_uint32 for one 32-bit draw ``u`` per bound ``n`` (>= 2): the draw and
    whether numpy would reject it and draw again (then the caller asks numpy)."""
    m = u * n
    leftover = m & _LOW
    threshold = (np.uint64(1 << 32) - n) % n
    return m >> _U64_32, leftover < threshold


_CHECKED: bool | None = None


def _arrays_agree() -> bool:
    """Whether :func:`_draw_two_arrays` gives numpy's numbers on this numpy (checked once per process)."""
    global _CHECKED
    if _CHECKED is None:
        seeds = stable_seeds(f"check:{i}" for i in range(48))
        seeds[:3] = np.array([0, 1, (1 << 32) - 1], dtype=np.uint64)  # one-word entropies
        n1 = np.array([1, 2, 3, 7, 1, 100, 5, 2] * 6, dtype=np.int64)
        n2 = np.array([1, 1, 2, 9, 100, 3, 1, 64] * 6, dtype=np.int64)
        a, b, redo = _draw_two_arrays(seeds, n1, n2)
        ref = [_draw_two_numpy(int(s), int(x), int(y)) for s, x, y in zip(seeds, n1, n2)]
        _CHECKED = bool(not redo.any() and [tuple(map(int, p)) for p in zip(a, b)] == ref)
        if not _CHECKED:
            log.warning("numpy %s draws differently from leakexp's array version of its generator; seeded draws "
                        "fall back to numpy one seed at a time (same numbers, slower)", np.__version__)
    return _CHECKED


def _draw_two_numpy(seed: int, n1: int, n2: int) -> tuple[int, int]:
    g = np.random.default_rng(seed)
    return int(g.integers(n1)), int(g.integers(n2))


def _draw_two_arrays(seeds: np.ndarray, n1: np.ndarray, n2: np.ndarray):
    out = first_output(seeds)
    words = [out & _LOW, out >> _U64_32]  # next_uint32: the low half, then the buffered high half
    n1u, n2u = n1.astype(np.uint64), n2.astype(np.uint64)
    a = np.zeros(len(seeds), dtype=np.int64)
    b = np.zeros(len(seeds), dtype=np.int64)
    redo = (n1 > _M32) | (n2 > _M32)  # numpy's 64-bit path: never for a list of documents
    first = n1 > 1  # integers(1) draws nothing
    with np.errstate(over="ignore"):
        x, rej = _lemire(words[0], np.where(first, n1u, np.uint64(2)))
        a = np.where(first, x.astype(np.int64), 0)
        redo |= first & rej
        second = np.where(first, words[1], words[0])
        y, rej = _lemire(second, np.where(n2 > 1, n2u, np.uint64(2)))
        b = np.where(n2 > 1, y.astype(np.int64), 0)
        redo |= (n2 > 1) & rej
    return a, b, redo


def draw_two(seeds: np.ndarray, n1: np.ndarray, n2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, ``g = np.random.default_rng(seed)`` then ``g.integers(n1)``, ``g.integers(n2)`` (n1, n2 >= 1), for
    all seeds at once: two int64 arrays, equal to the one-at-a-time draws."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    n1, n2 = np.asarray(n1, dtype=np.int64), np.asarray(n2, dtype=np.int64)
    if len(seeds) and ((n1 < 1).any() or (n2 < 1).any()):
        raise ValueError("draw_two needs n1, n2 >= 1 (integers(0) has nothing to draw)")
    if not len(seeds):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if not _arrays_agree():
        pairs = [_draw_two_numpy(int(s), int(x), int(y)) for s, x, y in zip(seeds, n1, n2)]
        return np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64)
    a, b, redo = _draw_two_arrays(seeds, n1, n2)
    for i in np.flatnonzero(redo):  # a rejection: numpy draws again; about one seed in 2**32 / n
        a[i], b[i] = _draw_two_numpy(int(seeds[i]), int(n1[i]), int(n2[i]))
    return a, b
