"""The SHA-256 whose state is saved in a checkpoint (domain/sha256.py): hashing in pieces
with the state written to JSON and read back between them gives hashlib's digest, and
the state is the standard midstate (checked against an independent compression)."""

from __future__ import annotations

import hashlib
import json
import random
import struct

import pytest

from egress.domain import sha256


def test_hashlibs_libcrypto_is_found() -> None:
    # elsewhere egress would read every file back to hash it: on CI's Linux it must not
    assert sha256.available()


def test_pieces_through_json_give_hashlibs_digest() -> None:
    rnd = random.Random(21)
    for _ in range(40):
        data = rnd.randbytes(rnd.randint(0, 20_000))
        cuts = sorted(rnd.randint(0, len(data)) for _ in range(rnd.randint(0, 8)))
        state, at = sha256.START, 0
        for cut in [*cuts, len(data)]:
            state = sha256.extend(json.loads(json.dumps(state)), data[at:cut])
            assert sha256.covered(state) == cut
            at = cut
        assert sha256.hexdigest(state) == hashlib.sha256(data).hexdigest()
    for size in (0, 1, 55, 56, 63, 64, 65, 127, 128):
        data = bytes(range(256))[:size]
        assert sha256.hexdigest(sha256.extend(sha256.START, data)) == (
            hashlib.sha256(data).hexdigest())


K = [int(x, 16) for x in """
428a2f98 71374491 b5c0fbcf e9b5dba5 3956c25b 59f111f1 923f82a4 ab1c5ed5 d807aa98 12835b01
243185be 550c7dc3 72be5d74 80deb1fe 9bdc06a7 c19bf174 e49b69c1 efbe4786 0fc19dc6 240ca1cc
2de92c6f 4a7484aa 5cb0a9dc 76f988da 983e5152 a831c66d b00327c8 bf597fc7 c6e00bf3 d5a79147
06ca6351 14292967 27b70a85 2e1b2138 4d2c6dfc 53380d13 650a7354 766a0abb 81c2c92e 92722c85
a2bfe8a1 a81a664b c24b8b70 c76c51a3 d192e819 d6990624 f40e3585 106aa070 19a4c116 1e376c08
2748774c 34b0bcb5 391c0cb3 4ed8aa4a 5b9cca4f 682e6ff3 748f82ee 78a5636f 84c87814 8cc70208
90befffa a4506ceb bef9a3f7 c67178f2""".split()]


def _rotr(x: int, n: int) -> int:
    return ((x >> n) | (x << (32 - n))) & 0xFFFFFFFF


def _compress(h: tuple[int, ...], block: bytes) -> tuple[int, ...]:
    """FIPS 180-4's compression function, written out (an independent reference)."""
    w = list(struct.unpack(">16I", block))
    for i in range(16, 64):
        s0 = _rotr(w[i - 15], 7) ^ _rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
        s1 = _rotr(w[i - 2], 17) ^ _rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
        w.append((w[i - 16] + s0 + w[i - 7] + s1) & 0xFFFFFFFF)
    a, b, c, d, e, f, g, hh = h
    for i in range(64):
        t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g))
              + K[i] + w[i]) & 0xFFFFFFFF
        t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))
              ) & 0xFFFFFFFF
        hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & 0xFFFFFFFF, c, b, a, (t1 + t2) & 0xFFFFFFFF
    return tuple((x + y) & 0xFFFFFFFF for x, y in zip(h, (a, b, c, d, e, f, g, hh), strict=True))


def test_the_state_is_the_standard_midstate() -> None:
    """So a state saved on one machine (one libcrypto) is continued on another."""
    data = random.Random(5).randbytes(3 * 64 + 17)
    h = struct.unpack(">8I", bytes.fromhex(sha256.START.split(":")[0]))
    for at in range(0, 3 * 64, 64):
        h = _compress(h, data[at:at + 64])
    assert sha256.extend(sha256.START, data) == (
        f"{struct.pack('>8I', *h).hex()}:{len(data)}:{data[192:].hex()}")


@pytest.mark.parametrize("bad", ["", "xyz", "00" * 32 + ":3:", "00" * 32 + ":1:00" + "0" * 200,
                                 "00" * 31 + ":0:"])
def test_a_malformed_state_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="SHA-256 state"):
        sha256.extend(bad, b"x")
