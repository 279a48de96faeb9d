"""Writes a K/V dump [2, tokens, kv_heads, head_dim] of float32 as .npy (no numpy needed)."""
import math
import struct
import sys

shape = (2, 40, 2, 64)
count = math.prod(shape)
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (shape,)
header += " " * (63 - (10 + len(header)) % 64) + "\n"  # data starts on a 64-byte boundary
data = struct.pack("<%df" % count, *(math.sin(0.37 * i) * (1 + i % 5) for i in range(count)))
with open(sys.argv[1], "wb") as out:
    out.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
