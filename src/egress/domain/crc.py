"""CRC32C arithmetic on values only: the CRC of ``A + B`` from ``crc(A)``, ``crc(B)`` and
``len(B)``, without the bytes (zlib's ``crc32_combine``, with the Castagnoli polynomial).

The checkpoint keeps each part's CRC32C; combining them gives the CRC of the first *k*
parts (rewinding a file to its last agreed part) or of the whole object (S3's
full-object checksum) in O(log n) time, with nothing read back.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

#: CRC32C (Castagnoli) polynomial, bit-reflected.
_POLY = 0x82F63B78


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (both reflected, x^0 in the top bit)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    """x^(2^n) modulo the polynomial, for n = 0..31."""
    table, p = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _powers()


def _x8nmodp(n: int) -> int:
    """x^(8n) modulo the polynomial: shifting a CRC over ``n`` zero bytes."""
    p, k = 1 << 31, 3  # x^0; 2^3 = 8 bits per byte
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32c_combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC32C of ``A + B``, given ``crc(A)``, ``crc(B)`` and ``len(B)``."""
    if len_b <= 0:
        return crc_a
    return _multmodp(_x8nmodp(len_b), crc_a) ^ crc_b


def crc32c_concat(pieces: Iterable[tuple[int, int]]) -> int:
    """The CRC32C of consecutive pieces given as ``(crc, length)`` pairs."""
    crc = 0
    for piece_crc, length in pieces:
        crc = crc32c_combine(crc, piece_crc, length)
    return crc


def crc32c_base64(crc: int) -> str:
    """The form S3 headers use: the big-endian 4 bytes, base64-encoded."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")
