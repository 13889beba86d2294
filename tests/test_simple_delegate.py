"""The Python SimpleDelegate in the real interpreter: lifecycle, partitions, errors, lifetime."""
import gc
import os
import resource

import numpy as np
import pytest
from fusion_delegate.runtime import Interpreter

from add_sub_delegate import AddSubDelegate, AddSubKernel
from conftest import builtin_interpreter, run, same_bits
from fusion_delegate import simple_delegate
from fusion_delegate.model import ModelBuilder

NONE = {"fused_activation_function": 0}


def chain_model(shape=(2, 3)) -> bytes:
    """z = (x + y) - y, then a MUL the delegate does not support."""
    b = ModelBuilder()
    x, y = b.input("x", shape), b.input("y", shape)
    s = b.op("ADD", [x, y], NONE, name="sum")
    d = b.op("SUB", [s, y], NONE, name="diff")
    b.output(b.op("MUL", [d, x], NONE, name="prod"))
    return b.to_bytes()


def three_regions_model() -> bytes:
    """Supported ADD/SUB regions of 3, 2 and 1 nodes, separated by unsupported MULs."""
    b = ModelBuilder()
    x = b.input("x", (4,))
    h = x
    for size in (3, 2, 1):
        for i in range(size):
            h = b.op("ADD" if i % 2 == 0 else "SUB", [h, x], NONE)
        h = b.op("MUL", [h, x], NONE)
    b.output(h)
    return b.to_bytes()


class Recorder(AddSubDelegate):
    """The example delegate, writing down every call the runtime makes."""

    def __init__(self, log, **kwargs):
        super().__init__(**kwargs)
        self.log = log

    def initialize(self, context):
        self.log.append("delegate.initialize")

    def is_node_supported(self, context, node):
        self.log.append(f"delegate.is_node_supported({node.index})")
        return super().is_node_supported(context, node)

    def create_kernel(self):
        log = self.log

        class Kernel(AddSubKernel):
            def init(self, *args):
                log.append("kernel.init")
                super().init(*args)

            def prepare(self, context):
                log.append("kernel.prepare")
                super().prepare(context)

            def invoke(self, context):
                log.append("kernel.invoke")
                super().invoke(context)
        return Kernel()


def inputs(rng, shape=(2, 3)):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]


def test_lifecycle_runs_init_prepare_invoke_in_order(rng):
    log = []
    interpreter = builtin_interpreter(chain_model(), [Recorder(log)])
    run(interpreter, inputs(rng))
    assert log == ["delegate.initialize", "delegate.is_node_supported(0)",
                   "delegate.is_node_supported(1)", "delegate.is_node_supported(2)",
                   "kernel.init", "kernel.prepare", "kernel.invoke"]


def test_resize_prepares_again_with_correct_outputs_at_new_shape(rng):
    log = []
    model = chain_model()
    interpreter = builtin_interpreter(model, [Recorder(log)])
    reference = builtin_interpreter(model)
    for shape in [(2, 3), (5, 2, 3), (7, 1), (2, 3)]:
        values = inputs(rng, shape)
        assert same_bits(run(interpreter, values)[0], run(reference, values)[0])
    assert log.count("kernel.prepare") >= 4


def test_delegate_that_claims_nothing_leaves_model_unchanged(rng):
    class Nothing(AddSubDelegate):
        def is_node_supported(self, context, node):
            return False

    delegate = Nothing()
    model = chain_model()
    values = inputs(rng)
    got = run(builtin_interpreter(model, [delegate]), values)
    assert delegate.last_partitions == [] and delegate.last_plan == (0, 1, 2)
    assert same_bits(got[0], run(builtin_interpreter(model), values)[0])


def test_max_delegated_partitions_keeps_only_the_largest():
    delegate = AddSubDelegate(max_delegated_partitions=1)
    builtin_interpreter(three_regions_model(), [delegate])
    assert [len(p.nodes) for p in delegate.last_partitions] == [3]


def test_min_nodes_per_partition_drops_small_partitions(rng):
    delegate = AddSubDelegate(min_nodes_per_partition=2)
    model = three_regions_model()
    interpreter = builtin_interpreter(model, [delegate])
    assert sorted(len(p.nodes) for p in delegate.last_partitions) == [2, 3]
    x = [rng.standard_normal(4).astype(np.float32)]
    assert same_bits(run(interpreter, x)[0], run(builtin_interpreter(model), x)[0])


def test_no_limits_delegates_every_region():
    delegate = AddSubDelegate()
    builtin_interpreter(three_regions_model(), [delegate])
    assert sorted(len(p.nodes) for p in delegate.last_partitions) == [1, 2, 3]


@pytest.mark.parametrize("where", ["initialize", "is_node_supported", "init", "prepare",
                                   "invoke"])
def test_exception_in_callback_becomes_runtime_error_with_reason(where, rng):
    class Failing(AddSubDelegate):
        def initialize(self, context):
            if where == "initialize":
                raise ValueError(f"boom in {where}")

        def is_node_supported(self, context, node):
            if where == "is_node_supported":
                raise ValueError(f"boom in {where}")
            return super().is_node_supported(context, node)

        def create_kernel(self):
            class Kernel(AddSubKernel):
                def init(self, *args):
                    if where == "init":
                        raise ValueError(f"boom in {where}")
                    super().init(*args)

                def prepare(self, context):
                    if where == "prepare":
                        raise ValueError(f"boom in {where}")
                    super().prepare(context)

                def invoke(self, context):
                    if where == "invoke":
                        raise ValueError(f"boom in {where}")
                    super().invoke(context)
            return Kernel()

    delegate = Failing()
    with pytest.raises(RuntimeError, match=f"ValueError: boom in {where}"):
        interpreter = builtin_interpreter(chain_model(), [delegate])
        run(interpreter, inputs(rng))
    assert isinstance(delegate.last_error, ValueError)
    # The process and the runtime survive: a fresh interpreter still runs and matches.
    values = inputs(rng)
    fresh = run(builtin_interpreter(chain_model(), [AddSubDelegate()]), values)
    assert same_bits(fresh[0], run(builtin_interpreter(chain_model()), values)[0])


def test_interpreter_stays_usable_after_a_failed_invoke(rng):
    fail = [True]

    class Flaky(AddSubDelegate):
        def create_kernel(self):
            class Kernel(AddSubKernel):
                def invoke(self, context):
                    if fail[0]:
                        raise RuntimeError("transient")
                    super().invoke(context)
            return Kernel()

    interpreter = builtin_interpreter(chain_model(), [Flaky()])
    values = inputs(rng)
    with pytest.raises(RuntimeError, match="transient"):
        run(interpreter, values)
    fail[0] = False
    want = run(builtin_interpreter(chain_model()), values)[0]
    assert same_bits(run(interpreter, values)[0], want)


def rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024


def test_hundreds_of_interpreters_with_shared_and_separate_delegates_do_not_leak(rng):
    model = chain_model((8, 16))
    shared = AddSubDelegate()
    values = inputs(rng, (8, 16))

    def cycle(n):
        for i in range(n):
            delegate = shared if i % 2 else AddSubDelegate()
            run(builtin_interpreter(model, [delegate]), values)
        gc.collect()
        simple_delegate.sweep_freed_kernels()

    cycle(50)
    before, kernels, delegates = (rss_kib(), len(simple_delegate._LIVE_KERNELS),
                                  len(simple_delegate._LIVE_DELEGATES))
    cycle(300)
    grown = rss_kib() - before
    assert len(simple_delegate._LIVE_KERNELS) == kernels
    assert len(simple_delegate._LIVE_DELEGATES) <= delegates + 1
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over 300 interpreters"


@pytest.mark.parametrize("cut", [0, 10, 100, -40])
def test_truncated_model_is_refused_cleanly_with_delegate(cut):
    model = chain_model()
    with pytest.raises(ValueError):
        Interpreter(model_content=model[:cut] if cut else b"", experimental_delegates=[
            AddSubDelegate()])


EXIT_SCRIPT = """
import sys
sys.path[:0] = [{root!r}, {tests!r}, {examples!r}]
import numpy as np
from add_sub_delegate import AddSubDelegate
from conftest import builtin_interpreter, run
from test_simple_delegate import chain_model
import gc
from fusion_delegate import native, simple_delegate
interpreter = builtin_interpreter(chain_model(), [AddSubDelegate()])
run(interpreter, [np.ones((2, 3), np.float32)] * 2)
# What interpreter shutdown may do before the last interpreter is finalized: our modules'
# globals are cleared (and with them whatever only they kept alive).
for module in (simple_delegate, native):
    vars(module).clear()
gc.collect()
del interpreter
gc.collect()
print("exiting")
"""


def test_interpreters_destroyed_after_our_modules_at_exit_do_not_crash():
    import subprocess
    import sys
    from conftest import ROOT
    script = EXIT_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"),
                                examples=str(ROOT / "examples"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr[-2000:]


def test_tensor_and_op_names_that_are_not_utf8_run_with_the_delegate(rng):
    """Flatbuffer strings are bytes: a model whose names are not UTF-8 runs without the
    delegate, so it runs with it, and the model reader reads it. (LiteRT's Python API itself
    decodes the names of inputs and outputs: only inner tensors can have such names.)"""
    from fusion_delegate import FusionDelegate
    from fusion_delegate.model import read_model
    b = ModelBuilder()
    x = b.input("x", (4, 64))
    h = b.op("MUL", [x, x], NONE, name="h_NAME2")
    b.output(b.op("MUL", [b.op("ADD", [h, x], NONE, name="s_NAME3"), x], NONE, name="y"))
    model = b.to_bytes()
    for marker in (b"NAME2", b"NAME3"):
        assert marker in model
        model = model.replace(marker, b"\xff\xfe\x80" + marker[-2:])
    data = [rng.standard_normal((4, 64)).astype(np.float32)]
    delegate = FusionDelegate(min_speedup=0.0, cache_dir="")
    fused = builtin_interpreter(model, [delegate])
    assert delegate.kernels, "the chain is claimed"
    assert same_bits(run(fused, data)[0], run(builtin_interpreter(model), data)[0])
    assert any("\ufffd" in t.name for t in read_model(model).subgraphs[0].tensors)
