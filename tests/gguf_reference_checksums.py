#!/usr/bin/env python3
# Prints the CRC-32 of what the gguf package's numpy dequantizers (gguf-py/gguf/quants.py) make of
# the pseudo-random rows that tests/test_gguf_dequantize.cpp builds, as the C++ table that test
# holds (GgufDequantize.MatchesGgufPyBitForBit). Run it again after changing the rows' recipe.
# Usage: pip install gguf numpy && python3 tests/gguf_reference_checksums.py
import zlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

VALUES_PER_ROW = 4096

# Type, (values, bytes) per block, and the offsets of its 16-bit floats in a block (fp16 scales;
# the upper half of an F32), whose exponents the recipe keeps finite.
TYPES = [
    (T.F32, 1, 4, [2]),
    (T.F16, 1, 2, [0]),
    (T.BF16, 1, 2, [0]),
    (T.Q4_0, 32, 18, [0]),
    (T.Q4_1, 32, 20, [0, 2]),
    (T.Q5_0, 32, 22, [0]),
    (T.Q5_1, 32, 24, [0, 2]),
    (T.Q8_0, 32, 34, [0]),
    (T.Q2_K, 256, 84, [80, 82]),
    (T.Q3_K, 256, 110, [108]),
    (T.Q4_K, 256, 144, [0, 2]),
    (T.Q5_K, 256, 176, [0, 2]),
    (T.Q6_K, 256, 210, [208]),
    (T.IQ4_NL, 32, 18, [0]),
    (T.IQ4_XS, 256, 136, [0]),
]


def splitmix64(state):
    mask = (1 << 64) - 1
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield z ^ (z >> 31)


def row_bytes(type_number, values, block_bytes, float_offsets):
    size = VALUES_PER_ROW // values * block_bytes
    numbers = splitmix64(type_number)
    data = bytearray()
    while len(data) < size:
        data += next(numbers).to_bytes(8, "little")
    data = data[:size]
    for block in range(0, size, block_bytes):
        for offset in float_offsets:
            data[block + offset + 1] &= 0xBF  # exponent below its maximum: finite, magnitude below 2
    return bytes(data)


for qtype, values, block_bytes, offsets in TYPES:
    data = np.frombuffer(row_bytes(int(qtype), values, block_bytes, offsets), dtype=np.uint8).reshape(1, -1)
    out = np.ascontiguousarray(quants.dequantize(data, qtype), dtype="<f4")
    assert out.shape == (1, VALUES_PER_ROW) and np.isfinite(out).all(), qtype.name
    print(f"        {{GgmlType::{qtype.name}, 0x{zlib.crc32(out.tobytes()):08x}u}},")
