"""Static lengths: every padded length (prompt, response, rows of a batch) is rounded up to a
bucket so that shapes, and so compiled programs, repeat across calls.

``BUCKETS`` are the powers of two and 1.5x the powers of two from 16 to 8192, so at most a
third of a padded sequence is padding; past the largest bucket, lengths round up to a multiple
of it (``round_up``). Row counts use powers of two (``row_bucket``).
"""

from __future__ import annotations

from collections.abc import Sequence

BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)


def round_up(n: int, buckets: Sequence[int] = BUCKETS) -> int:
    """Smallest bucket ``>= n``; beyond the largest bucket ``B``, ``ceil(n / B) * B``."""
    if n < 0:
        raise ValueError(f"length must be >= 0, got {n}")
    for b in sorted(buckets):
        if n <= b:
            return b
    top = max(buckets)
    return -(-n // top) * top


def row_bucket(n: int) -> int:
    """Smallest power of two ``>= n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def round_to_multiple(n: int, k: int) -> int:
    """``ceil(n / k) * k`` (the smallest multiple of ``k`` that holds ``n``)."""
    if k < 1:
        raise ValueError(f"multiple must be >= 1, got {k}")
    return -(-n // k) * k
