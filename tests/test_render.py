"""codegen.render's fast loop: which clamps it leaves out and which values it counts.

Whether the two loops agree with LiteRT is the equivalence tests' job (tests/test_equivalence.py
runs every random model with and without inf/NaN inputs); here: what the analysis decides.
"""
import ast
import re
from dataclasses import replace

import numpy as np
import pytest
from numba import njit

from codegen.compile import KernelCache
from codegen.ir import KernelIR, Op, Value
from codegen.kernel_data import kernel_data
from codegen.native import aligned_copy, line_aligned, stream_fence, stream_store
from codegen.fastpath import FastPath
from codegen.render import legend
from codegen.schedule import STREAM_MIN_BYTES, plan
from codegen.target import numba_target
from codegen.variants import one_body
from codegen.writer import INDENT, LINE_LIMIT
from conftest import HOST, builtin_interpreter, kernel_source, run, same_bits
from fusion_delegate import FusionDelegate
from fusion_delegate.fusion import LAYOUT
from fusion_delegate.demo import build_demo_model, build_quantized_demo_model
from perf.workloads import (NORM_WORKLOADS, WORKLOADS, Workload, bias_relu6_scale, chain16,
                            se_gate)

SHAPE = (4, 8)
RELU6 = 3


def kernel_ir(ops: list[tuple[str, tuple[int, ...], int, int]], outputs: tuple[int, ...],
              constant: int | None = None) -> KernelIR:
    """ops: (op, inputs, output, activation); tensor 0 is the input, `constant` a literal."""
    tensors = {0} | {t for _, inputs, output, _ in ops for t in (*inputs, output)}
    values = tuple(Value(t, SHAPE if t != constant else (), 0.5 if t == constant else None)
                   for t in sorted(tensors))
    return KernelIR(values, tuple(Op(n, op, inputs, output, (("activation", act),))
                                     if op in ("ADD", "SUB", "MUL", "DIV") else
                                     Op(n, op, inputs, output)
                                     for n, (op, inputs, output, act) in enumerate(ops)),
                    inputs=(0,), outputs=outputs)


def test_a_chain_of_arithmetic_is_checked_only_at_its_output():
    ir = kernel_ir([("ADD", (0, 9), 1, 0), ("MUL", (1, 9), 2, 0), ("SUB", (2, 0), 3, 0),
                    ("NEG", (3,), 4, 0)], outputs=(4,), constant=9)
    assert FastPath.of(ir) == FastPath(dropped=3, checked=(4,), guarded=())
    source = kernel_source(ir, LAYOUT)
    assert "misses = max(misses, magnitude(neg[i0]))" in source
    assert re.search(r"if \w+_nests\(x, neg, False\) < INF_BITS:", source)
    assert source.count("clamp_overflow(") == 3         # all under `if exact:`


def test_values_are_checked_where_an_op_would_absorb_an_inf():
    """TANH, DIV's operands and a RELU6 activation turn inf into something finite."""
    ir = kernel_ir([("MUL", (0, 0), 1, 0), ("TANH", (1,), 2, 0), ("ADD", (0, 2), 3, 0),
                    ("DIV", (3, 1), 4, 0), ("ADD", (4, 0), 5, RELU6)], outputs=(5,))
    fast = FastPath.of(ir)
    assert fast.dropped == 3                            # ADD-RELU6 keeps its clamp
    assert fast.checked == (1, 3, 4)
    assert fast.pays is False                           # three checks for three clamps


def test_sin_and_cos_are_guarded_and_their_operands_checked():
    ir = kernel_ir([("ADD", (0, 0), 1, 0), ("SIN", (1,), 2, 0), ("COS", (0,), 3, 0),
                    ("MUL", (2, 3), 4, 0)], outputs=(4,))
    fast = FastPath.of(ir)
    assert fast == FastPath(dropped=2, checked=(1, 4), guarded=(1, 2))
    source = kernel_source(ir, LAYOUT)
    assert "sin_near_f32(add)" in source and "sin_f32(add)" in source
    one_line = " ".join(source.split())
    assert ("max(magnitude(add), miss_if(far_angle(add)), miss_if(far_angle(x[i0])), "
            "magnitude(mul[i0]))") in one_line


def test_kernels_without_clamps_to_drop_have_one_loop():
    ir = kernel_ir([("ADD", (0, 0), 1, RELU6), ("LOGISTIC", (1,), 2, 0)], outputs=(2,))
    assert not FastPath.of(ir).pays
    source = kernel_source(ir, LAYOUT)
    assert "misses" not in source and source.count("for i0 in range") == 1


def test_generated_lines_fit_in_100_columns_however_deep_the_nest():
    """A 2-D nest (the [4, 1] operand), threads and tiles."""
    shape = (64, 4, 300)
    values = (Value(0, shape), Value(6, (4, 1)), *(Value(t, shape) for t in range(1, 6)))
    ops = (Op(0, "SIN", (0,), 1), Op(1, "COS", (1,), 2), Op(2, "EXP", (2,), 3),
           Op(3, "ADD", (3, 6), 4, (("activation", 0),)), Op(4, "SIN", (4,), 5))
    source = kernel_source(KernelIR(values, ops, inputs=(0, 6), outputs=(5,), threads=2),
                           LAYOUT)
    assert "in 2 parts (one a thread)" in source and "for tile in" in source and "misses" in source
    assert max(len(line) for line in source.splitlines() if not line.startswith("#")) <= 100
    assert source.count("# Nest 1 over") == 1          # the fast and exact loops as one text


def test_the_precision_is_in_the_text_only_where_some_op_depends_on_it():
    """One text, so one compiled kernel, for a partition whose math is the same either way."""
    arithmetic = [("ADD", (0, 9), 1, 0), ("MUL", (1, 9), 2, RELU6)]
    both = {precision: kernel_source(replace(kernel_ir(arithmetic, (2,), constant=9),
                                             precision=precision), LAYOUT)
            for precision in ("exact", "fast")}
    assert both["exact"] == both["fast"] and "precision" not in both["fast"]
    transcendental = kernel_ir([("TANH", (0,), 1, 0)], outputs=(1,))
    fast = kernel_source(replace(transcendental, precision="fast"), LAYOUT)
    exact = kernel_source(transcendental, LAYOUT)
    assert "| precision fast |" in fast and "| precision exact |" in exact


def test_kernels_compile_with_noalias_arguments():
    ir = kernel_ir([("ADD", (0, 0), 1, 0)], outputs=(1,))
    assert "pipeline_class=NoAliasCompiler)" in kernel_source(ir, LAYOUT)


def test_partitions_equal_up_to_tensor_ids_render_one_text():
    """The source names no tensor or node of the model, so the same chain over other tensors
    (other ids, other node numbers) is one text, one compiled kernel; the legend tells the
    partitions apart."""
    def chain(x: int, y: int, total: int, out: int, first_node: int) -> KernelIR:
        values = tuple(Value(t, (4, 8)) for t in sorted((x, y, total, out)))
        ops = (Op(first_node, "ADD", (x, y), total, (("activation", 0),)),
               Op(first_node + 1, "TANH", (total,), out))
        return KernelIR(values, ops, inputs=(x, y), outputs=(out,), node_inputs=(x, y))
    first, second = chain(0, 1, 2, 3, 0), chain(40, 17, 52, 60, 30)
    assert kernel_source(first, LAYOUT) == kernel_source(second, LAYOUT)
    assert legend(first) == "# nodes 0, 1; tensors x0 = t0, x1 = t1, tanh = t3"
    assert legend(second) == "# nodes 30, 31; tensors x0 = t40, x1 = t17, tanh = t60"


def per_channel_chain(rows: int, channels: int, constants: int) -> tuple[str, str]:
    """x * c0 + c1 * c2 ... over [rows, channels], one [channels] constant per op: the kernel's
    source and its nests, once for the fast and the exact loop (codegen.variants). In the
    source x is x0, c(k) is x{k + 1}, and h(k) is named after its op (mul, add, mul_1, ...)."""
    first = 1 + constants                         # tensor id of the first op's output
    values = [Value(0, (rows, channels))]
    ops, h = [], 0
    for k in range(constants):
        values += [Value(1 + k, (channels,)),
                   Value(first + k, (rows, channels))]
        ops.append(Op(k, "ADD" if k % 2 else "MUL", (h, 1 + k), first + k,
                      (("activation", 0),)))
        h = first + k
    ir = KernelIR(tuple(sorted(values, key=lambda v: v.tensor)), tuple(ops),
                  inputs=tuple(range(first)), outputs=(h,))
    source = kernel_source(ir, LAYOUT)
    return source, source.split("    misses = np.int32(0)\n")[1].split("    return misses")[0]


def test_row_blocks_check_their_outputs_after_each_block_in_one_flat_loop():
    """x * c0 + c1 ... over [100, 16], 8 per-channel constants: the inner loop over a row
    only stores; the block's outputs are checked in a flat loop while in L1. The exact loop
    is the same nest, with its clamps."""
    source, nests = per_channel_chain(100, 16, 8)
    lines = nests.splitlines()
    assert lines[:5] == [
        f"    # Nest 1 over [100, 16] in blocks of 64 rows: MUL, ADD -> {h(7)}",
        "    for block in range(2):",
        "        for i0 in range(block * 64, min(block * 64 + 64, 100)):",
        "            for i1 in range(16):",
        "                if exact:"]
    assert f"                    {h(0)} = x0[i0 * 16 + i1] * {c(0)}[i1]" in lines
    assert lines[-4:] == [
        f"                    {h(7)}[i0 * 16 + i1] = {h(6)} + {c(7)}[i1]",
        "        if not exact:",
        "            for j in range((min(block * 64 + 64, 100) - block * 64) * 16):",
        f"                misses = max(misses, magnitude({h(7)}[block * 64 * 16 + j]))"]
    assert nests.count("magnitude(") == 1 and source.count("for block in range(2):") == 1


def c(k: int) -> str:
    """per_channel_chain's k-th constant's name in the source."""
    return f"x{k + 1}"


def h(k: int) -> str:
    """per_channel_chain's k-th op output's name in the source."""
    return ("add" if k % 2 else "mul") + (f"_{k // 2}" if k >= 2 else "")


@pytest.mark.parametrize("channels, constants", [(48, 2), (112, 2), (144, 2), (96, 4)])
def test_row_blocks_are_vectorised_along_rows_without_gathers(tmp_path, channels, constants):
    """Row blocks of few constants, and their flat checks: LLVM vectorised the loop across
    rows or the check loop with gathers (4-8x slower) in the forms they replaced."""
    source, fast = per_channel_chain(4096 // channels, channels, constants)
    assert "in blocks of" in fast
    name = re.search(r"^def (\w+)_invoke\(", source, re.M).group(1)
    kernel = KernelCache(str(tmp_path)).get(name, source)
    assert "gather" not in kernel.inspect_asm()


def test_unrolled_rows_update_misses_once_an_iteration_and_leave_the_rest_to_one_row_loops():
    """16 per-channel constants over [10, 256]: rows 0-7 four at a time, rows 8-9 alone."""
    source, fast = per_channel_chain(10, 256, 16)
    lines = [line.strip() for line in fast.splitlines()]
    assert lines[:4] == [f"# Nest 1 over [10, 256], 4 rows an iteration: MUL, ADD -> {h(15)}",
                         "for i0 in range(0, 8, 4):", "for i1 in range(256):", "# Row i0"]
    assert f"{h(0)}_r3 = x0[(i0 + 3) * 256 + i1] * {c(0)}[i1]" in lines
    assert f"{h(15)}[(i0 + 3) * 256 + i1] = {h(14)}_r3 + {c(15)}[i1]" in lines
    one_line = " ".join(fast.split())
    out = h(15)
    assert (f"misses = max(misses, max(magnitude({out}[i0 * 256 + i1]), magnitude({out}[(i0 + 1) "
            f"* 256 + i1]), magnitude({out}[(i0 + 2) * 256 + i1]), magnitude({out}[(i0 + 3) * 256 "
            "+ i1]))) for i0 in range(8, 10):") in one_line
    assert fast.count("misses = max(") == 2


def test_row_tile_copies_loop_over_a_bounded_period_of_a_vector_or_more():
    """Row tiles (4 constants): a period of 32 is copied by a loop of run-time length bounded
    by it (a literal one LLVM unrolls into scalar stores); a period of 8, shorter than a
    vector, by a literal loop, which LLVM unrolls into one vector."""
    for channels, loop in ((32, f"for j in range(min({c(0)}.shape[0], 32)):"),
                           (8, "for j in range(8):")):
        source, fast = per_channel_chain(256, channels, 4)
        assert f"{c(0)}_rows = np.empty(" in fast and loop in fast, channels


@njit
def copied_to_a_line(values):
    """aligned_copy's copy (on this function's stack): its address mod 64, and its values."""
    copy = aligned_copy(values)
    return copy.ctypes.data % 64, copy.copy()


def test_per_channel_constants_out_of_l2_are_read_from_cache_aligned_copies():
    """16 constants out of L2, in unrolled rows ([4100, 64]) and in the plain nest of longer
    rows ([1100, 256]): each constant copied once, before the fast loop, to the start of a
    cache line on the stack (a 16-byte-aligned one spans two lines a vector load)."""
    for rows, channels in ((4100, 64), (1100, 256)):
        source, _ = per_channel_chain(rows, channels, 16)
        kernel = source.split("pipeline_class=NoAliasCompiler)\n")[1]
        body = kernel.split("):\n", 1)[1].splitlines()
        assert body[:16] == [f"    {c(k)} = aligned_copy({c(k)})" for k in range(16)], channels
        assert source.count(f"aligned_copy({c(0)})") == 1
        assert re.search(r"from codegen.native import .*\baligned_copy\b", source)
    values = np.arange(80, dtype=np.float32)
    for start in range(16):
        line_offset, copy = copied_to_a_line(values[start:start + 64])
        assert line_offset == 0 and np.array_equal(copy, values[start:start + 64])


@pytest.mark.parametrize("rows, channels", [(4100, 64), (1100, 256)])
def test_nests_out_of_l2_match_litert_bit_for_bit(tmp_path, rows, channels):
    """chain16 over [4100, 64] and [1100, 256] (the aligned copies' nests) in LiteRT's builtin
    kernels and in the delegate, on the fast loop and, with an inf and a NaN in x, on the
    exact loop."""
    case = Workload(f"chain16_c{channels}", chain16, channels).case(rows * channels)
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_nodes_per_partition=1,
                              min_speedup=0.0)
    ours, oracle = builtin_interpreter(case.model, [delegate]), builtin_interpreter(case.model)
    assert [c.reason for c in delegate.claims.values()] == [None] * 16
    x = case.inputs["x"]
    special = x.copy()
    special.flat[[5, 70000]] = np.inf, np.nan
    for inputs in ([x], [special]):
        (got,), (want,) = run(ours, inputs), run(oracle, inputs)
        assert same_bits(got, want)


@pytest.mark.parametrize("channels, where", [(96, "stack_empty(96, np.float32)"),
                                             (32768, "np.empty(32768, np.float32)")])
def test_buffers_between_nests_go_on_the_stack_within_its_budget(channels, where):
    """x * TANH(s), s of `channels` elements: TANH's buffer (`tanh`) on the kernel's stack,
    unless it is larger than schedule.STACK_BYTES (128 KiB here); then it is allocated."""
    values = (Value(0, (4, channels)), Value(1, (channels,)),
              Value(2, (channels,)), Value(3, (4, channels)))
    ir = KernelIR(values, (Op(0, "TANH", (1,), 2),
                              Op(1, "MUL", (0, 2), 3, (("activation", 0),))),
                  inputs=(0, 1), outputs=(3,))
    assert f"    tanh = {where}" in kernel_source(ir, LAYOUT).splitlines()


streaming = pytest.mark.skipif(not HOST.streaming_stores, reason="streaming stores are x86's")


@streaming
@pytest.mark.parametrize("workload, channels, threads", [
    (chain16, 16, 1), (chain16, 16, 2), (chain16, 256, 1), (se_gate, 64, 1),
    (bias_relu6_scale, 24, 2)])
def test_streamed_nests_match_litert_bit_for_bit(tmp_path, workload, channels, threads):
    """chain16 with an output of STREAM_MIN_BYTES, its output streamed, checked per lane
    (C = 16; on two threads, each part its own lanes) or per element (C = 256), a
    squeeze-excite gate (its streamed nest reads the gate's buffer; its LOGISTIC as the builtin
    kernel computes it, precision="exact") and row tiles on two threads (C = 24): the fast loop,
    and the exact loop for an inf at the end of x (the last part's) or a NaN at its start."""
    case = Workload(f"{workload.__name__}_c{channels}", workload, channels).case(
        STREAM_MIN_BYTES // 4 + channels)             # whole rows, STREAM_MIN_BYTES or more
    delegate = FusionDelegate(cache_dir=str(tmp_path), min_nodes_per_partition=1,
                              min_speedup=0.0, num_threads=threads, precision="exact")
    ours = builtin_interpreter(case.model, [delegate], num_threads=threads)
    oracle = builtin_interpreter(case.model)
    (kernel,) = delegate.kernels.values()
    assert "stream_store(" in kernel.kernel.source
    assert ("lane_misses[" in kernel.kernel.source) == (workload is chain16 and channels < 128)
    x = case.inputs["x"]
    inf_last, nan_first = x.copy(), x.copy()
    inf_last.flat[-3], nan_first.flat[5] = np.inf, np.nan
    for first in (x, inf_last, nan_first):
        inputs = [first if name == "x" else value for name, value in case.inputs.items()]
        (got,), (want,) = run(ours, inputs), run(oracle, inputs)
        assert same_bits(got, want)


@streaming
def test_a_streamed_nest_runs_the_exact_loop_into_an_output_off_a_cache_line(tmp_path):
    """Streaming vector stores need the output on a cache line (a fault otherwise): into one
    that is not, the kernel runs the exact loop, whose stores need no alignment."""
    rows = -(-STREAM_MIN_BYTES // (4 * 48))
    source, fast = per_channel_chain(rows, 48, 2)
    assert "if line_aligned(add):" in source
    assert "stream_store(add, i0 * 48 + i1, add_value)" in fast
    name = re.search(r"^def (\w+)_invoke\(", source, re.M).group(1)
    kernel = KernelCache(str(tmp_path)).get(name, source)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rows * 48, dtype=np.float32)
    c0, c1 = rng.standard_normal(48, dtype=np.float32), rng.standard_normal(48, dtype=np.float32)
    want = (x.reshape(rows, 48) * c0 + c1).ravel()
    for offset in (0, 1, 4):
        memory = np.empty(rows * 48 + 32, np.float32)
        start = (-memory.ctypes.data % 64) // 4 + offset
        out = memory[start:start + rows * 48]
        kernel.loop(x, c0, c1, out)
        assert same_bits(out, want), offset


@njit
def streamed_halves(out):
    """out[i] = i / 2 with stream_store, from a float64 value, if `out` starts on a line."""
    if not line_aligned(out):
        return False
    for i in range(out.shape[0]):
        stream_store(out, i, np.float64(i) * 0.5)
    stream_fence()
    return True


@streaming
def test_stream_store_casts_its_value_and_line_aligned_finds_the_line():
    memory = np.zeros(64 + 32, np.float32)
    start = (-memory.ctypes.data % 64) // 4
    assert streamed_halves(memory[start:start + 64])
    assert np.array_equal(memory[start:start + 64], np.arange(64, dtype=np.float32) / 2)
    assert not streamed_halves(memory[start + 1:start + 33])


def test_the_two_loops_are_one_text_where_they_differ_in_whole_statements():
    """codegen.variants: lines both loops have once, the rest under `if exact:`, `else:` or
    `if not exact:`."""
    exact = ["for i in range(4):", "    y[i] = clamp_overflow(x[i] + c)", "z = 1"]
    fast = ["for i in range(4):", "    y[i] = x[i] + c", "    misses = max(misses, y[i])",
            "stream_fence()", "z = 1"]
    assert one_body(exact, fast) == [
        "for i in range(4):", "    if exact:", "        y[i] = clamp_overflow(x[i] + c)",
        "    else:", "        y[i] = x[i] + c", "        misses = max(misses, y[i])",
        "if not exact:", "    stream_fence()", "z = 1"]


def test_a_statement_whose_continuation_line_differs_is_one_text_under_if_exact():
    """A difference in a continuation line is a difference of the whole statement; its block
    (the loop around it) stays one."""
    exact = ["for i in range(4):", "    y[i] = f(a[i],", "             b[i])", "z = 1"]
    fast = ["for i in range(4):", "    y[i] = f(a[i],", "             c[i])", "z = 1"]
    assert one_body(exact, fast) == [
        "for i in range(4):", "    if exact:", "        y[i] = f(a[i],", "                 b[i])",
        "    else:", "        y[i] = f(a[i],", "                 c[i])", "z = 1"]


def test_a_statement_the_if_takes_past_the_line_limit_is_wrapped_again():
    """Under `if exact:` a statement is an indent deeper: one that then passes LINE_LIMIT is
    broken again, at its call's arguments or at its operator."""
    call = "y = f(" + ", ".join(f"argument_{k}" for k in range(6)) + ")"
    pad = " " * (LINE_LIMIT - len(INDENT) - len(call))       # just fits, one indent in
    body = one_body([pad + call, pad + "z = 1"], [pad + "z = 1"])
    assert [line.strip() for line in body] == [
        "if exact:", "y = f(argument_0, argument_1, argument_2, argument_3, argument_4,",
        "argument_5)", "z = 1"]
    a, b = "a" * 40, "b" * (len(call) - 47)
    body = one_body([pad + "y = 0"], [f"{pad}y = {a} + {b}"])
    assert [line.strip() for line in body] == ["if exact:", "y = 0", "else:", f"y = ({a}",
                                                f"+ {b})"]
    assert all(len(INDENT + line) <= LINE_LIMIT for line in body)


def unread_names(source: str) -> set[str]:
    """The names a kernel module defines at its top (constants, tables, imports) that nothing
    in it reads."""
    tree = ast.parse(source)
    defined = {target.id for node in tree.body if isinstance(node, ast.Assign)
               for target in node.targets}
    defined |= {alias.asname or alias.name for node in tree.body
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    return defined - {node.id for node in ast.walk(tree)
                      if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def identity_tables(ir: KernelIR) -> list[str]:
    """The kernel's tables (its data, codegen.kernel_data) that give every 8-bit code back: by
    q - qmin, or by the raw byte of int8."""
    identities = (list(range(-128, 128)), list(range(256)), [*range(128), *range(-128, 0)])
    data = kernel_data(ir, plan(ir, numba_target()))
    return [array.name for array, values in zip(data.arrays, data.views())
            if array.name.endswith("_table") and values.tolist() in identities]


@pytest.mark.parametrize("model", [
    "demo", "demo_int8", *(f"{name}_1000" for name in ("int8_block", "int8_island",
                                                         "hard_swish_int8", "transcendental",
                                                         "gelu", "layernorm_c48",
                                                         "softmax_c128"))])
def test_kernel_sources_define_only_what_they_read(tmp_path, model):
    """No constant, table or import a kernel never reads (int8 kernels once carried the float
    constants, GELU's kernel numpy), and no table that looks every code up as itself."""
    workloads = {**WORKLOADS, **NORM_WORKLOADS}
    content = (build_demo_model(tokens=16, width=32) if model == "demo" else
               build_quantized_demo_model(size=8) if model == "demo_int8" else
               workloads[model.removesuffix("_1000")].case(1000).model)
    for precision in ("fast", "exact"):
        delegate = FusionDelegate(cache_dir=str(tmp_path), min_speedup=0.0, precision=precision)
        builtin_interpreter(content, [delegate])
        assert delegate.kernels, precision
        for kernel in delegate.kernels.values():
            source = kernel.kernel.source
            assert not unread_names(source) and not identity_tables(kernel.ir), source
