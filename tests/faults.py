"""Deliberately wrong kernels, for proving that `fusion-delegate check` finds them.

Each fault patches this process only: `inject("round:MUL")`, or run the CLI with one,
`python tests/faults.py round:MUL check MODEL ...`.

- `round:OP`: OP (arithmetic) rounds its result differently from LiteRT (its float64 result
  nudged by 2^-27 of itself before rounding to float32: one ulp off on a few percent of the elements, as an
  FMA contraction or another evaluation order would be).
- `negzero:OP`: OP's result loses the sign of a zero (-0.0 becomes 0.0, what `x + 0.0` does).
- `tail_lsb`: int8/uint8 partition outputs are one LSB off in the tail (the last partial
  vector block, or the last block of 16) where the code there is even.

The first two change the kernel's source (codegen.ops.OPS, which rendering reads); the third
changes what the kernel writes (the delegate's invoke, which then stays in Python).
"""
from __future__ import annotations

from dataclasses import replace

BLOCK = 16
KINDS = ("round", "negzero", "tail_lsb")
#: Ops whose expression is plain float32 arithmetic, which `round` can evaluate in float64.
ROUNDABLE = ("ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "SQUARE")
#: Ops that give -0.0 for some inputs, so that `negzero` can show.
SIGNED_ZERO = ("MUL", "HARD_SWISH", "NEG", "DIV", "ADD", "SUB", "TANH", "GELU", "LEAKY_RELU",
               "PRELU", "ELU", "MINIMUM", "MAXIMUM")


def inject(fault: str) -> None:
    """Patch this process so that the kernels it builds have `fault`."""
    kind, _, op = fault.partition(":")
    if kind == "tail_lsb":
        _tail_lsb()
        return
    from codegen.ops import OPS
    spec = OPS[op]
    if kind == "round":      # operands in float64: the nudge must come before the rounding
        if op not in ROUNDABLE:
            raise ValueError(f"round: faults are for {', '.join(ROUNDABLE)}, not {op}")
        wrap = "np.float32(({e}) * (1.0 + 2.0 ** -27))"
        widen = {"{a}": "np.float64({a})", "{b}": "np.float64({b})"}
    else:
        wrap, widen = "(({e}) + np.float32(0.0))", {}

    def patched(template: str) -> str:
        for operand, wide in widen.items():
            template = template.replace(operand, wide)
        return wrap.replace("{e}", template)
    changed = {field: patched(getattr(spec, field))
               for field in ("expr", "fast_expr", "approx_expr", "approx_fast_expr")
               if getattr(spec, field)}
    OPS[op] = replace(spec, **changed)


def _tail_lsb() -> None:
    from fusion_delegate.fusion import FusionKernel
    prepare, invoke = FusionKernel.prepare, FusionKernel.invoke

    def prepare_in_python(self, context):
        prepare(self, context)
        self.native_invoke_address = 0

    def invoke_off_by_one(self, context):
        invoke(self, context)
        self.native_invoke_address = 0
        for t in self.partition.outputs:
            view = context.view(t).reshape(-1)
            if view.dtype.kind not in "iu" or view.itemsize != 1 or not view.size:
                continue
            tail = view[view.size - (view.size % BLOCK or min(BLOCK, view.size)):]
            tail[tail % 2 == 0] += 1      # the dtype's largest code is odd: no overflow

    FusionKernel.prepare = prepare_in_python
    FusionKernel.invoke = invoke_off_by_one


if __name__ == "__main__":
    import sys

    from fusion_delegate.cli import main

    inject(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
