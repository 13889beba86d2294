"""Whether to claim what the kernel can compute: the cost model's prediction and the margins.

claims.py says what the kernel can reproduce; here is whether claiming it is worth it, for a
node (a rule the cost model cannot price) and for a partition (its prediction, with margins
for the model's error). Every decision is a NotClaimed reason, or None to claim. The margins
were fitted to the corpus: perf/README.md, "The cost model behind `min_speedup`", has the
measurements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from codegen.ops import MATMULS, REDUCTIONS, STENCILS

from .claims import REDUCTION_CODES, STENCIL_CODES, NotClaimed, op_name, qparams
from .context import Context, NodeInfo
from .features import PartitionFeatures
from .worth import UNKNOWN, Prediction, predict

#: A partition predicted to save less than this is left to LiteRT whatever its speedup: it is
#: what an extra kernel call varies by, and less than a model's run-to-run noise.
MIN_SAVING_US = 0.5
#: At more than one thread, a partition cut out of XNNPACK's work whose inputs XNNPACK's
#: threads make must be predicted at least this much faster, whatever min_speedup's margin:
#: XNNPACK runs its ops on its pool, our kernel beside it on one thread. Not for an input a
#: builtin kernel makes, which XNNPACK's threads do not share. With the cut priced whole at
#: more threads (worth.CostModel.predict), 1.4: the fuzz's int8 case 3, predicted 1.20x at 2
#: threads, ran 0.44x in place; case 15, predicted 1.44x, gained 1.20x (perf/README.md, "Fused
#: activations and the cut, priced at 2 threads").
THREADED_MIN_SPEEDUP = 1.4
#: Binary ops XNNPACK runs, float32 and int8, in one pass over their operands.
MEMORY_SPEED_BINARY = frozenset({"ADD", "SUB", "MUL"})
#: ... and from broadcast runs this long on, in calls long enough that their cost is nothing
#: (features.broadcast_run): alone, such an op has nothing to fuse. An int8 ADD of a [228]
#: constant over [1, 8, 16, 228] ran 0.96x fused, predicted 1.34x (perf/README.md, "Fused
#: activations and the cut, priced at 2 threads").
LONG_RUN = 128
#: A depthwise convolution is claimed from this many taps (kernel height x width) on: every
#: float32 one at one thread (perf/README.md, "3x3 depthwise convolutions").
STENCIL_MIN_TAPS = 9
#: PAD and PADV2 (builtin codes): XNNPACK folds one that feeds a convolution into it. A
#: depthwise convolution of fewer taps than PADDED_MIN_TAPS after one is left to XNNPACK:
#: claimed, its PAD ran alone, and 32 of face_detection_full_range_sparse's 41 3x3 ones, each
#: after a PAD, made the model slower (0.41-1.11x each in place; perf/README.md). A 7x7 one,
#: 10-28x faster than XNNPACK's, is claimed all the same.
PAD_CODES = (34, 60)
PADDED_MIN_TAPS = 49
#: The same for an int8 one: XNNPACK runs 3x3 and 5x5 int8 depthwise convolutions as fast as
#: the nest or faster (0.5-1.4x, mostly 0.8-0.9x at the corpus's shapes) and the 5x5 ones
#: made EfficientNet-B0 int8 slower (1.09x -> 1.00x); the 7x7 ones, an IGEMM in XNNPACK, run
#: 10-27x faster fused (perf/README.md, "Depthwise convolutions").
STENCIL_MIN_TAPS_INT8 = 49
#: The same at more than one thread: XNNPACK splits a 5x5 one over its pool, and claimed, they
#: made MobileNetV3 and EfficientNet-B0 float32 slower at 2 threads (perf/README.md).
STENCIL_MIN_TAPS_THREADED = 49
#: The same where kernels are compiled for narrower vectors than the CPU has (a `haswell` or
#: `generic` cache on an AVX-512 CPU): EfficientNet-B0's 5x5 partitions, whose swishes run at
#: half XNNPACK's width there, measured 0.69-0.99x of LiteRT (perf/README.md, "Kernels for
#: other CPUs"); the 7x7 convolutions still run 12-20x faster than XNNPACK's.
STENCIL_MIN_TAPS_NARROW = 49
#: Where kernels are compiled for vectors this many times narrower than the CPU's or more (a
#: `generic`, SSE, cache on an AVX-512 CPU), a float partition with a reduction is left to
#: LiteRT: the LayerNorms of the dynamic-range transformers, predicted 3.7x faster there, each
#: lost 1.7-3.2 us beside LiteRT's hybrid FULLY_CONNECTEDs (0.93-0.95x whole); at half the
#: width (haswell) and natively they gain (perf/README.md, "A cost model per CPU"). int8 ones
#: still gain at generic, against LiteRT's builtin kernels.
NARROW_REDUCTION_SHORTFALL = 4
#: A partition whose kernel runs two or more transcendental ops (or int8 table lookups) in rows
#: of this many elements or more read with one value per row (features.row_chain_length) is
#: left to LiteRT: such chains ran at 0.6-1.0x of XNNPACK's ops for rows of 8-95 elements on
#: Zen 4, and 1.5-3x faster for rows of 2-5, where XNNPACK calls its kernel once per row
#: (perf/README.md, "The performance fuzz on Zen 4"); an int8 one with two lookups in rows of
#: 95 at 0.76-0.88x on Zen 4 and Emerald Rapids ("Another CPU").
ROW_CHAIN_MIN_COLS = 8


@dataclass(frozen=True)
class ClaimPolicy:
    """The delegate's `min_speedup` applied: 0 claims every partition whose kernel builds."""
    min_speedup: float
    cost_model: str | Path | None = None     # worth.load_cost_model's path; None: the shipped
    #: How many times narrower than the CPU's (XNNPACK's) the kernels' vectors are (1: as wide).
    vector_shortfall: float = 1.0
    #: The kernels' vector width, which the cost model sets against its fit's; 0: the fit's.
    vector_bytes: int = 0

    def node_reason(self, context: Context, node: NodeInfo) -> NotClaimed | None:
        """Why a node the kernel reproduces is still left to LiteRT's default path: XNNPACK
        runs int8/uint8 reductions at memory speed, and an int8 LayerNorm fused whole was no
        faster than its two partitions with XNNPACK's MEANs between them
        (docs/quantized_semantics.md, "MEAN (40)")."""
        if self.min_speedup <= 0:
            return None
        x = context.tensor(node.inputs[0])
        if node.builtin_code in STENCIL_CODES:
            taps = math.prod(context.tensor(node.inputs[1]).shape[1:3])
            maker = context.makers.get(node.inputs[0])
            if maker is not None and maker.builtin_code in PAD_CODES and taps < PADDED_MIN_TAPS:
                return NotClaimed("{} of {} taps after a {} left to XNNPACK, which pads in the "
                                  "convolution (claimed with min_speedup=0)", op_name(node), taps,
                                  op_name(maker))
            threaded = context.num_threads > 1
            narrow = self.vector_shortfall > 1
            least = (STENCIL_MIN_TAPS_INT8 if qparams(x) is not None else
                     STENCIL_MIN_TAPS_THREADED if threaded else
                     STENCIL_MIN_TAPS_NARROW if narrow else STENCIL_MIN_TAPS)
            if taps < least:
                quantized = qparams(x) is not None
                kind = f"{x.type_name.lower()} " if quantized else ""
                where = ("" if quantized else   # the int8 rule holds at any threads and width
                         f" at {context.num_threads} threads" if threaded else
                         " with vectors narrower than the CPU's" if narrow else "")
                return NotClaimed("{} {}of {} taps left to XNNPACK, faster than fused below {}{} "
                                  "(claimed with min_speedup=0)", op_name(node), kind, taps,
                                  least, where)
            return None
        if node.builtin_code in REDUCTION_CODES and qparams(x) is not None:
            return NotClaimed("{} {} left to XNNPACK, faster than fused (claimed with "
                              "min_speedup=0)", x.type_name.lower(), op_name(node))
        return None

    def predict(self, partition: PartitionFeatures, interpreter_threads: int) -> Prediction:
        """The cost model's verdict on fusing a partition at its current shapes. Its costs are
        those measured at the interpreter's thread count (what XNNPACK runs on), not the
        kernel's: XNNPACK on 2 threads is up to twice faster than on 1."""
        if self.min_speedup <= 0:
            return UNKNOWN
        return predict(partition, interpreter_threads, self.cost_model, self.vector_bytes)

    def partition_reason(self, partition: PartitionFeatures,
                         prediction: Prediction) -> NotClaimed | None:
        """Why a partition predicted so is left to LiteRT, if it is. A partition that is one
        binary op of two whole tensors XNNPACK runs has nothing to fuse: XNNPACK reads and
        writes it once, at memory speed, as the kernel would (its int8 ADD costs less than the
        per-channel one the cost model was fitted on). Nor does a kernel that runs
        transcendental or lookup chains in rows of ROW_CHAIN_MIN_COLS or more read with a value
        per row, which the cost model prices as if vectorised over whole tiles, nor float reductions
        in kernels compiled for a quarter of the CPU's vector width. The cost model prices
        elementwise ops, not convolutions or products: a partition with a depthwise
        convolution node_reason let through is claimed, and one with an int8 BATCH_MATMUL,
        which LiteRT runs with its reference kernel (perf/README.md, "int8 BATCH_MATMUL")."""
        if any(op.name in STENCILS or op.name.split("/")[0] in MATMULS
               for op in partition.ops):
            return None
        if self.min_speedup > 0 and partition.row_chain >= ROW_CHAIN_MIN_COLS:
            return NotClaimed("transcendental ops or lookups in rows of {} read with a value "
                              "per row: slower than XNNPACK from rows of {} (claimed with "
                              "min_speedup=0)", partition.row_chain, ROW_CHAIN_MIN_COLS)
        if self.min_speedup > 0 and self.vector_shortfall >= NARROW_REDUCTION_SHORTFALL:
            reductions = sorted({op.name for op in partition.ops if op.name in REDUCTIONS})
            if reductions:
                return NotClaimed("float {} with vectors {:g}x narrower than the CPU's: slower "
                                  "than LiteRT's (claimed with min_speedup=0)",
                                  "/".join(reductions), self.vector_shortfall)
        if self.min_speedup > 0 and len(partition.ops) == 1:
            (op,) = partition.ops
            if op.name.split("/")[0] in MEMORY_SPEED_BINARY:
                run = op.elements if op.run is None else op.run
                if op.inputs == 2:
                    return NotClaimed("one {} of two whole tensors: XNNPACK runs it at memory "
                                      "speed, nothing to fuse", op.name)
                if run >= LONG_RUN:
                    return NotClaimed("one {} broadcasting in runs of {}: XNNPACK runs it at "
                                      "memory speed, nothing to fuse", op.name, run)
        if self.pays(prediction):
            return None
        return NotClaimed("not worth it (predicted {:.2f}x LiteRT, {:+.1f} us)",
                          prediction.speedup, prediction.saving_us)

    def pays(self, prediction: Prediction) -> bool:
        """Predicted faster by min_speedup's margin over 1 times the threads, and MIN_SAVING_US
        sooner (unknown: it pays). The margin grows with the threads because the predictions
        miss more there: XNNPACK runs its ops on its pool, our kernel beside it on one thread.
        With more threads, one cut out of XNNPACK's threaded work needs THREADED_MIN_SPEEDUP."""
        threads = prediction.threads
        required = 1.0 + (self.min_speedup - 1.0) * max(threads, 1)
        if threads > 1 and prediction.cut_us > 0 and not prediction.builtin_input:
            required = max(required, THREADED_MIN_SPEEDUP)
        return prediction.speedup >= required and (
            not math.isfinite(prediction.speedup) or prediction.saving_us >= MIN_SAVING_US)
