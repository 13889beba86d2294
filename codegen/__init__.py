"""From a partition to a compiled kernel: IR, loop-nest source, math functions, compilation.

Knows nothing of ctypes or the interpreter: struct offsets, tensor indices and shapes arrive as
ints and tuples.
"""
