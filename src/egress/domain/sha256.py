"""A SHA-256 whose running state fits in a checkpoint, as the CRC32C's does (domain/crc.py).

hashlib's objects cannot be saved, so a file's digest could only be carried across parts
inside one process. This keeps the state as a short string instead — the eight chaining
words, the count of bytes hashed and the bytes of the unfinished 64-byte block, the
standard "midstate" of FIPS 180-4, independent of any library — so the process that
resumes a file continues its digest from the checkpoint without reading the file back.

The hashing itself is OpenSSL's (the libcrypto that Python's hashlib uses), through its
public ``SHA256_Init/Update/Final`` and the plain ``SHA256_CTX`` struct of
``<openssl/sha.h>``: as fast as hashlib and, like it, without the GIL. It is checked
against hashlib once, on first use; where it is not available (no libcrypto found, a
layout that does not agree), :func:`available` is False and callers fall back to reading
the finished file back.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import logging
import re
import struct
import sys
from functools import cache

log = logging.getLogger(__name__)

#: the midstate as text: "<64 hex: h0..h7>:<bytes hashed>:<hex of the unfinished block>"
_STATE = re.compile(r"([0-9a-f]{64}):(\d{1,20}):((?:[0-9a-f]{2}){0,63})")
_IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
       0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
#: the digest state of no bytes at all: where every file starts
START = "".join(f"{w:08x}" for w in _IV) + ":0:"
#: the chaining words after one block of 64 zero bytes
_ZERO_BLOCK = "da5698be17b9b46962335799779fbeca8ce5d491c0d26243bafef9ea1837a9d8"


class _Ctx(ctypes.Structure):
    """``SHA256_CTX`` (OpenSSL 1.1 and 3.x): SHA_LONG is a 32-bit unsigned int."""

    _fields_ = [
        ("h", ctypes.c_uint32 * 8),
        ("Nl", ctypes.c_uint32),
        ("Nh", ctypes.c_uint32),
        ("data", ctypes.c_uint8 * 64),  # SHA_LONG data[16], filled byte by byte
        ("num", ctypes.c_uint32),
        ("md_len", ctypes.c_uint32),
    ]


def _candidates() -> list[str]:
    """libcrypto as hashlib loaded it (its path in /proc/self/maps), then by name."""
    names: list[str] = []
    with contextlib.suppress(ImportError):  # a Python built without OpenSSL
        import _hashlib  # noqa: F401  # loads hashlib's libcrypto into this process
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libcrypto" in path and path not in names:
                    names.append(path)
    except OSError:
        pass
    found = ctypes.util.find_library("crypto")
    names += [n for n in (found, "libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.dylib") if n]
    return names


@cache
def _lib() -> ctypes.CDLL | None:
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
            for fn in (lib.SHA256_Init, lib.SHA256_Update, lib.SHA256_Final):
                fn.restype = ctypes.c_int
            lib.SHA256_Update.argtypes = [ctypes.POINTER(_Ctx), ctypes.c_char_p, ctypes.c_size_t]
            if _self_test(lib):
                return lib
        except (OSError, AttributeError, ValueError, RuntimeError) as exc:
            log.debug("sha256 state: %s not usable: %s", name, exc)
    log.info("no libcrypto with SHA256_* found: SHA-256 digests are read back from files")
    return None


def _self_test(lib: ctypes.CDLL) -> bool:
    """Hash in pieces with the state saved and restored between them, as a resume does,
    and compare with hashlib (catches a struct layout that is not the one expected)."""
    data = bytes(range(256)) * 3
    state = START
    pieces = [data[:1], data[1:63], data[63:64], data[64:65], data[65:200], data[200:]]
    for piece in pieces:
        state = _update(lib, state, piece)
    # the chaining words after one block are FIPS 180-4's (the state is library independent)
    return (_final(lib, state) == hashlib.sha256(data).hexdigest()
            and _update(lib, START, b"\0" * 64) == f"{_ZERO_BLOCK}:64:"
            and _final(lib, START) == hashlib.sha256(b"").hexdigest())


def _load(state: str) -> _Ctx:
    m = _STATE.fullmatch(state)
    if m is None:
        raise ValueError(f"not a SHA-256 state: {state[:80]!r}")
    words, count, tail = bytes.fromhex(m[1]), int(m[2]), bytes.fromhex(m[3])
    if len(tail) != count % 64 or count >= 1 << 61:
        raise ValueError(f"inconsistent SHA-256 state: {state[:80]!r}")
    ctx = _Ctx()
    ctx.h[:] = struct.unpack(">8I", words)
    bits = count * 8
    ctx.Nl, ctx.Nh = bits & 0xFFFFFFFF, bits >> 32
    ctypes.memmove(ctx.data, tail, len(tail))
    ctx.num, ctx.md_len = len(tail), 32
    return ctx


def _dump(ctx: _Ctx) -> str:
    count = ((ctx.Nh << 32) | ctx.Nl) // 8
    tail = bytes(ctx.data)[: ctx.num]
    return f"{struct.pack('>8I', *ctx.h).hex()}:{count}:{tail.hex()}"


def _update(lib: ctypes.CDLL, state: str, data: bytes) -> str:
    ctx = _load(state)
    if data and not lib.SHA256_Update(ctypes.byref(ctx), data, len(data)):
        raise RuntimeError("SHA256_Update failed")
    return _dump(ctx)


def _final(lib: ctypes.CDLL, state: str) -> str:
    ctx = _load(state)
    out = ctypes.create_string_buffer(32)
    if not lib.SHA256_Final(out, ctypes.byref(ctx)):
        raise RuntimeError("SHA256_Final failed")
    return out.raw.hex()


def available() -> bool:
    """Whether states can be extended here (else a digest is read back from the file)."""
    return sys.byteorder == "little" and _lib() is not None


def extend(state: str, data: bytes) -> str:
    """The state after hashing ``data`` after the bytes ``state`` covers."""
    lib = _lib()
    assert lib is not None, "sha256.extend without a backend: check available() first"
    return _update(lib, state, data)


def hexdigest(state: str) -> str:
    """The SHA-256 (hex) of the bytes ``state`` covers."""
    lib = _lib()
    assert lib is not None, "sha256.hexdigest without a backend: check available() first"
    return _final(lib, state)


def covered(state: str) -> int:
    """How many bytes ``state`` has hashed."""
    m = _STATE.fullmatch(state)
    if m is None:
        raise ValueError(f"not a SHA-256 state: {state[:80]!r}")
    return int(m[2])
