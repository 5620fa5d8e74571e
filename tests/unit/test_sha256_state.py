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


K = struct.unpack(">64I", bytes.fromhex(
    "428a2f9871374491b5c0fbcfe9b5dba53956c25b59f111f1923f82a4ab1c5ed5"
    "d807aa9812835b01243185be550c7dc372be5d7480deb1fe9bdc06a7c19bf174"
    "e49b69c1efbe47860fc19dc6240ca1cc2de92c6f4a7484aa5cb0a9dc76f988da"
    "983e5152a831c66db00327c8bf597fc7c6e00bf3d5a7914706ca635114292967"
    "27b70a852e1b21384d2c6dfc53380d13650a7354766a0abb81c2c92e92722c85"
    "a2bfe8a1a81a664bc24b8b70c76c51a3d192e819d6990624f40e3585106aa070"
    "19a4c1161e376c082748774c34b0bcb5391c0cb34ed8aa4a5b9cca4f682e6ff3"
    "748f82ee78a5636f84c878148cc7020890befffaa4506cebbef9a3f7c67178f2"
))


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
