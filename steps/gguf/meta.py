"""Set metadata keys in a GGUF file without re-reading its vocabulary element by element.

gguf-py's `copy_with_new_metadata` builds a `GGUFReader`, which turns every element of every metadata array into a
numpy view: ~3 s for a 49k-token vocabulary, per file, whatever the file's size (the tensor data itself copies in
~0.2 s). Here the file is walked once with `struct` (arrays of numbers are skipped by size; only arrays of strings are
stepped through), the key/value section is written again with the new keys (a key that exists is replaced in place,
so no key appears twice, which llama.cpp refuses), and the tensor infos and tensor data are copied byte for byte
behind a header padded to the file's alignment. Tensor offsets are relative to the data section, so they stay valid.
Layout: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (GGUF v2/v3, little-endian).
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
from pathlib import Path

MAGIC = b"GGUF"
STRING, ARRAY, BOOL, FLOAT32 = 8, 9, 7, 6
# value type -> struct format of one element, for the fixed-size types
FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
DEFAULT_ALIGNMENT = 32


class GGUFFormatError(ValueError):
    """The file is not a GGUF this code can rewrite (wrong magic, version, or a truncated header)."""


def _skip_value(buf: memoryview, pos: int, vtype: int) -> int:
    if vtype in FIXED:
        return pos + struct.calcsize("<" + FIXED[vtype])
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in FIXED:
            return pos + count * struct.calcsize("<" + FIXED[etype])
        for _ in range(count):
            pos = _skip_value(buf, pos, etype)
        return pos
    raise GGUFFormatError(f"unknown GGUF value type {vtype} at byte {pos}")


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack("<Q", len(data)) + data


def _encode(key: str, value: str | float | bool) -> bytes:
    if isinstance(value, bool):
        body = struct.pack("<I?", BOOL, value)
    elif isinstance(value, float):
        body = struct.pack("<If", FLOAT32, value)
    elif isinstance(value, str):
        body = struct.pack("<I", STRING) + _string(value)
    else:
        raise TypeError(f"metadata {key}: {type(value).__name__} is not one of str, float, bool")
    return _string(key) + body


def set_metadata(path: Path, values: dict[str, str | float | bool]) -> None:
    """Rewrite `path` with `values` set as metadata keys (replacing keys that exist); written beside it, then moved."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with path.open("rb") as src:
        head = src.read(24)
        if len(head) < 24 or head[:4] != MAGIC:
            raise GGUFFormatError(f"{path} is not a GGUF file (magic {head[:4]!r})")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
        if version not in (2, 3):
            raise GGUFFormatError(f"{path}: GGUF version {version}, only 2 and 3 are supported")
        # The header (key/values + tensor infos) is small next to the data: read a generous prefix, grow if needed.
        size = path.stat().st_size
        chunk = min(size, 64 << 20)
        while True:
            src.seek(0)
            buf = memoryview(src.read(chunk))
            try:
                kept, pos, alignment = [], 24, DEFAULT_ALIGNMENT
                for _ in range(n_kv):
                    start = pos
                    (klen,) = struct.unpack_from("<Q", buf, pos)
                    key = bytes(buf[pos + 8 : pos + 8 + klen]).decode()
                    (vtype,) = struct.unpack_from("<I", buf, pos + 8 + klen)
                    pos = _skip_value(buf, pos + 12 + klen, vtype)
                    if key == "general.alignment":
                        (alignment,) = struct.unpack_from("<I", buf, pos - 4)
                    if key not in values:
                        kept.append(bytes(buf[start:pos]))
                infos_start = pos
                for _ in range(n_tensors):
                    (nlen,) = struct.unpack_from("<Q", buf, pos)
                    (n_dims,) = struct.unpack_from("<I", buf, pos + 8 + nlen)
                    pos += 8 + nlen + 4 + 8 * n_dims + 4 + 8
                if pos > len(buf):
                    raise struct.error("header runs past the bytes read")
                break
            except struct.error:
                if chunk >= size:
                    raise GGUFFormatError(f"{path}: the header is truncated") from None
                chunk = min(size, chunk * 4)
        infos = bytes(buf[infos_start:pos])
        data_start = -(-pos // alignment) * alignment
        new_kv = [_encode(k, v) for k, v in values.items()]
        header = MAGIC + struct.pack("<IQQ", version, n_tensors, len(kept) + len(new_kv))
        header += b"".join(kept) + b"".join(new_kv) + infos
        header += b"\0" * (-len(header) % alignment)
        try:
            with tmp.open("wb") as dst:
                dst.write(header)
                src.seek(data_start)
                shutil.copyfileobj(src, dst, 16 << 20)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)


def _read_value(buf: memoryview, pos: int, vtype: int) -> tuple[object, int]:
    if vtype in FIXED:
        fmt = "<" + FIXED[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return bytes(buf[pos + 8 : pos + 8 + n]).decode("utf-8", errors="surrogateescape"), pos + 8 + n
    if vtype == ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        values = []
        if etype == STRING:  # vocabularies and merges: 100k+ strings, so the loop is kept tight
            unpack, append = struct.unpack_from, values.append
            for _ in range(count):
                (n,) = unpack("<Q", buf, pos)
                append(str(buf[pos + 8 : pos + 8 + n], "utf-8", "surrogateescape"))
                pos += 8 + n
            return values, pos
        for _ in range(count):
            value, pos = _read_value(buf, pos, etype)
            values.append(value)
        return values, pos
    raise GGUFFormatError(f"unknown GGUF value type {vtype} at byte {pos}")


def read_metadata(path: Path, keys: tuple[str, ...]) -> dict[str, object]:
    """The values of `keys` (those present) from `path`'s key/value section; other keys are skipped, not decoded."""
    path = Path(path)
    with path.open("rb") as src, mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        buf = memoryview(mapped)  # mapped, not read: only the header's pages are touched
        try:
            return _read_kv(path, buf, keys)
        finally:
            buf.release()


def _read_kv(path: Path, buf: memoryview, keys: tuple[str, ...]) -> dict[str, object]:
    if len(buf) < 24 or bytes(buf[:4]) != MAGIC:
        raise GGUFFormatError(f"{path} is not a GGUF file (magic {bytes(buf[:4])!r})")
    version, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise GGUFFormatError(f"{path}: GGUF version {version}, only 2 and 3 are supported")
    found: dict[str, object] = {}
    pos = 24
    try:
        for _ in range(n_kv):
            (klen,) = struct.unpack_from("<Q", buf, pos)
            key = bytes(buf[pos + 8 : pos + 8 + klen]).decode()
            (vtype,) = struct.unpack_from("<I", buf, pos + 8 + klen)
            pos += 12 + klen
            if key in keys:
                found[key], pos = _read_value(buf, pos, vtype)
            else:
                pos = _skip_value(buf, pos, vtype)
    except struct.error:
        raise GGUFFormatError(f"{path}: the header is truncated") from None
    return found
