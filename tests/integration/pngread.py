"""A small PNG reader for the image tests (8-bit gray/RGB/RGBA, non-interlaced): it checks the
signature, every chunk's CRC and the IHDR, and undoes the five row filters. Not a general
decoder; enough to verify what weftd sends without extra packages."""
import struct
import zlib

import numpy as np

SIG = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(data):
    """Returns uint8 [H, W, C]. Raises ValueError on anything malformed."""
    if data[:8] != SIG:
        raise ValueError("not a PNG signature")
    pos, idat, ihdr, seen_end = 8, b"", None, False
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in chunk {kind!r}")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            seen_end = True
        pos += 12 + n
    if ihdr is None or not seen_end:
        raise ValueError("missing IHDR or IEND")
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth} type {ctype} interlace {interlace}")
    c = CHANNELS[ctype]
    raw = zlib.decompress(idat)
    stride = w * c
    if len(raw) != h * (stride + 1):
        raise ValueError("IDAT size does not match the image size")
    out = np.zeros((h, stride), np.int32)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        cur = np.zeros(stride, np.int32)
        for x in range(stride):
            a = cur[x - c] if x >= c else 0
            b = prev[x]
            cc = prev[x - c] if x >= c else 0
            pred = [0, a, b, (a + b) // 2, _paeth(a, b, cc)][f]
            cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.astype(np.uint8).reshape(h, w, c)
