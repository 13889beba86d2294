"""The `fusion-delegate` commands, run as a user runs them: `python -m fusion_delegate ...`."""
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from fusion_delegate.demo import build_demo_model
from fusion_delegate.model import ModelBuilder, read_model, write_model
from fusion_delegate.options import FusionOptions
from fusion_delegate.tools.cut import cut_partition
from fusion_delegate.tools.diff import OutputErrors
from fusion_delegate.tools.runner import build

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"\b(\d+) of (\d+) nodes delegated in (\d+) partitions\b")
COMMANDS = ("inspect", "bench", "diff", "check", "report", "compile", "tune")


class Files:
    """Models every test reads, and one compile cache shared by all the subprocesses."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = root / "kernels"
        self.demo = root / "demo.tflite"
        self.demo.write_bytes(build_demo_model())
        self.fc_only = root / "fc_only.tflite"
        self.fc_only.write_bytes(fc_only_model())
        data = self.demo.read_bytes()
        self.truncated = root / "truncated.tflite"
        self.truncated.write_bytes(data[: len(data) // 2])
        self.random = root / "random.tflite"
        self.random.write_bytes(np.random.default_rng(7).bytes(4096))

    def cli(self, *args: str, cache: bool = True) -> subprocess.CompletedProcess:
        extra = ["--option", f"cache_dir={self.cache}"] if cache else []
        return subprocess.run([sys.executable, "-m", "fusion_delegate", *args, *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    def extra_args(self, command: str) -> list[str]:
        """The cheapest run of each command."""
        return {"inspect": [], "bench": ["--num_runs", "3"], "diff": ["--num_runs", "2"],
                "check": ["--seconds", "1"],
                "report": ["--num_runs", "2", "-o", str(self.root / f"out_{command}")],
                "compile": [], "tune": ["--seconds", "0.02"]}[command]


def fc_only_model() -> bytes:
    """A model with nothing to fuse: a single FULLY_CONNECTED."""
    b = ModelBuilder("fc_only")
    x = b.input("x", (1, 8))
    w = b.const("w", np.arange(32, dtype=np.float32).reshape(4, 8) / 32)
    y = b.op("FULLY_CONNECTED", [x, w, b.const("b", np.zeros(4, np.float32))],
             {"fused_activation_function": 0}, shape=(1, 4))
    b.output(y)
    return b.to_bytes()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    return Files(tmp_path_factory.mktemp("cli"))


def no_traceback(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr


# --- inspect -----------------------------------------------------------------------------------
def test_inspect_demo_lists_every_node_reasons_partitions_and_summary(files):
    result = files.cli("inspect", str(files.demo))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    delegated, total, partitions = map(int, SUMMARY.search(out).groups())
    assert total == 25 and 0 < delegated < total and partitions >= 1
    node_rows = [line for line in out.splitlines() if re.match(r"\s*\d+\s+[A-Z_]+\s", line)]
    assert len(node_rows) == total
    assert sum("no: op FULLY_CONNECTED not supported" in row for row in node_rows) == 2
    assert "fused ops" in out and "fused_" in out
    no_traceback(result)


def test_inspect_json_with_source_matches_the_claims(files):
    result = files.cli("inspect", str(files.demo), "--json", "--source")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["nodes"]) == 25
    claimed = {n["index"] for n in data["nodes"] if n["reason"] is None}
    assert claimed == {i for p in data["partitions"] for i in p["nodes"]}
    assert data["summary"].startswith(f"{len(claimed)} of 25 nodes")
    for partition in data["partitions"]:
        assert f"def {partition['kernel']}(" in partition["source"]
        assert partition["bytes_moved"] > 0


def test_inspect_model_with_nothing_to_fuse_says_so_and_succeeds(files):
    result = files.cli("inspect", str(files.fc_only))
    assert result.returncode == 0, result.stderr
    assert "0 of 1 nodes delegated in 0 partitions" in result.stdout
    assert "op FULLY_CONNECTED not supported" in result.stdout
    assert "nothing to fuse" in result.stdout


# --- bench -------------------------------------------------------------------------------------
def test_bench_demo_reports_both_interpreters_side_by_side(files):
    result = files.cli("bench", str(files.demo), "--num_runs", "3", "--warmup_runs", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for row in ("Init", "First inference", "Warmup (avg)", "Inference (avg)", "Inference (p99)"):
        assert re.search(rf"^{re.escape(row)}\s+[\d,.]+\s+[\d,.]+$", out, re.M), row
    assert re.search(r"^count\s+3\s+3$", out, re.M)
    assert re.search(r"speedup: \d+\.\d\dx \(avg\)", out)
    assert SUMMARY.search(out)
    assert out.count("Inference timings in us: Init:") == 2
    assert "[bench]" in result.stderr and "[bench]" not in out


def test_bench_json_on_model_with_nothing_to_fuse(files):
    result = files.cli("bench", str(files.fc_only), "--num_runs", "4", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"] == "0 of 1 nodes delegated in 0 partitions"
    assert "nothing to fuse" in data["note"]
    for side in ("litert", "fusion_delegate"):
        stats = data[side]["inference_us"]
        assert stats["count"] == 4 and stats["min"] <= stats["p50"] <= stats["max"]


# --- compile -----------------------------------------------------------------------------------
LOAD = """
import json, sys
from fusion_delegate import FusionDelegate
from fusion_delegate.runtime import Interpreter
delegate = FusionDelegate(cache_dir=sys.argv[2])
interpreter = Interpreter(model_path=sys.argv[1], experimental_delegates=[delegate])
interpreter.allocate_tensors()
print(json.dumps([k.kernel.cache_hit for k in delegate.kernels.values()]))
"""


def test_compile_caches_every_kernel_a_new_process_then_only_loads(files, tmp_path):
    cache = tmp_path / "shipped"
    result = files.cli("compile", str(files.demo), "--threads", "1", "2", "--json",
                       "--option", f"cache_dir={cache}", cache=False)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["models"]
    assert [r["threads"] for r in rows] == [1, 2]
    assert rows[0]["partitions"] >= 1 and rows[0]["compiled"] == rows[0]["partitions"]
    loaded = subprocess.run([sys.executable, "-c", LOAD, str(files.demo), str(cache)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert set(json.loads(loaded.stdout.splitlines()[-1])) == {"disk"}


# --- diff --------------------------------------------------------------------------------------
def test_diff_demo_prints_inference_diff_lines_and_passes(files):
    result = files.cli("diff", str(files.demo), "--num_runs", "2", "--input_range=-2,2")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^OutputDiff\[0\]: avg_error=\S+, std_dev=\S+, max_abs_error=\S+, "
                     r"max_rel_error=\S+, max_ulp=\S+", out, re.M)
    assert re.search(r"^Reference run latency: avg=\d+\(us\), std_dev=\d+\(us\)$", out, re.M)
    assert "float inputs in [-2, 2)" in out and "pass" in out.splitlines()[-1]
    assert re.search(r"^test: +fusion_delegate \(precision=(exact|fast)\)", out, re.M)


def test_diff_model_with_nothing_to_fuse_reports_top1_for_class_scores(files):
    result = files.cli("diff", str(files.fc_only), "--num_runs", "3")
    assert result.returncode == 0, result.stderr
    assert "0 of 1 nodes delegated" in result.stdout
    assert "OutputDiff[0]: avg_error=0, std_dev=0" in result.stdout
    assert "top-1 agreement: 3/3 (100.0%)" in result.stdout


def test_output_errors_count_ulps_and_a_one_sided_nan_as_infinite():
    errors = OutputErrors({"name": "y", "shape": np.array([1, 3]), "dtype": np.float32})
    reference = np.array([[np.inf, -2.0, 0.0]], np.float32)
    test = reference.copy()
    test[0, 1] = np.nextafter(np.float32(-2.0), np.float32(-3.0))
    errors.add(reference, test)
    assert errors.max_ulp == 1 and errors.max_abs == pytest.approx(2.384e-7, rel=1e-3)
    assert errors.top1_agree == 1 and errors.run_means[0] < 1e-7  # equal infinities: no error
    test[0, 2] = np.nan
    errors.add(reference, test)
    assert errors.max_abs == np.inf and errors.to_json(0)["max_ulp"] == np.inf


# --- report ------------------------------------------------------------------------------------
class Page(HTMLParser):
    """What the structural checks need: tags, resource URLs, text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.bars = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        self.urls += [attrs[a] for a in ("src", "href", "xlink:href", "srcset") if a in attrs]
        self.bars += tag == "rect" and attrs.get("class") == "bar"

    def handle_data(self, data):
        self.text.append(data)


def test_report_demo_writes_self_contained_html_and_json(files):
    out = files.root / "report_demo"
    result = files.cli("report", str(files.demo), "-o", str(out), "--num_runs", "3")
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "report.json").read_text())
    assert data["partitions"] and SUMMARY.search(result.stdout)
    html = (out / "report.html").read_text()
    page = Page()
    page.feed(html)
    text = " ".join(page.text)
    for partition in data["partitions"]:
        assert partition["kernel"] in text and partition["delegate_us"] > 0
        assert partition["cut_summary"].startswith(f"{len(partition['nodes'])} of ")
    assert "svg" in page.tags and page.bars >= 2 * (len(data["partitions"]) + 1)
    assert not page.urls and "script" not in page.tags and "link" not in page.tags
    assert "url(" not in html and "@import" not in html
    assert "[report] partition" in result.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not on PATH")
def test_report_renders_in_headless_chromium(files, tmp_path):
    out = files.root / "report_demo"
    if not (out / "report.html").exists():
        assert files.cli("report", str(files.demo), "-o", str(out), "--num_runs", "2")\
            .returncode == 0
    png = tmp_path / "report.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={png}", "--window-size=1200,2000",
                    (out / "report.html").as_uri()], capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_report_model_with_nothing_to_fuse_says_so(files):
    out = files.root / "report_fc"
    result = files.cli("report", str(files.fc_only), "-o", str(out), "--num_runs", "2")
    assert result.returncode == 0, result.stderr
    assert "0 of 1 nodes delegated in 0 partitions" in result.stdout
    assert "nothing to fuse" in (out / "report.html").read_text()


def test_cut_partition_is_a_model_the_delegate_claims_whole(files):
    model = read_model(files.demo)
    options = FusionOptions.parse([f"cache_dir={files.cache}"])
    fused = build(files.demo.read_bytes(), fuse=options, resolver="builtin")
    biggest = fused.delegate.last_partitions[0]
    cut = cut_partition(model, biggest.nodes, biggest.inputs, biggest.outputs)
    graph = cut.subgraphs[0]
    assert [op.op for op in graph.operators] == [model.subgraphs[0].operators[n].op
                                                 for n in biggest.nodes]
    assert all(graph.tensors[i].data is None for i in graph.inputs)
    alone = build(write_model(cut), fuse=options, resolver="builtin")
    n = len(biggest.nodes)
    assert alone.delegate.summary() == f"{n} of {n} nodes delegated in 1 partitions"


# --- failures: one line on stderr, a non-zero status, no traceback -----------------------------
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", ["truncated", "random", "missing"])
def test_bad_model_file_is_one_line_error(files, command, bad):
    path = files.root / "missing.tflite" if bad == "missing" else getattr(files, bad)
    result = files.cli(command, str(path), *files.extra_args(command))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"fusion-delegate: error: {path}: ")
    assert [line for line in lines if "error" in line] == lines[-1:]
    assert result.stdout == ""
    no_traceback(result)


def test_unsupported_input_dtype_is_one_line_error(files):
    b = ModelBuilder("complex")
    x = b.input("x", (1, 4), np.complex64)
    b.output(b.op("RESHAPE", [x, b.const("shape", np.array([4], np.int32))],
                  {"new_shape": [4]}, shape=(4,)))
    path = files.root / "complex.tflite"
    path.write_bytes(b.to_bytes())
    result = files.cli("bench", str(path), "--num_runs", "1")
    assert result.returncode == 1
    assert "input 'x' has dtype complex64" in result.stderr
    no_traceback(result)


def test_unknown_option_key_exits_2_with_did_you_mean(files):
    result = files.cli("inspect", str(files.demo), "--option", "num_thread=2", cache=False)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("fusion-delegate: error: unknown option 'num_thread'; valid: ")
    assert "cache_dir" in line and line.endswith("(did you mean 'num_threads'?)")
    assert result.stdout == ""


def test_bad_option_value_exits_2(files):
    result = files.cli("diff", str(files.demo), "--option", "min_nodes_per_partition=two")
    assert result.returncode == 2
    assert "min_nodes_per_partition must be int" in result.stderr
    no_traceback(result)


# --- demo --------------------------------------------------------------------------------------
def test_demo_shows_partitions_speedup_and_agreement(files):
    saved = files.root / "saved_demo.tflite"
    result = files.cli("demo", "--runs", "3", "--save", str(saved))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert SUMMARY.search(out) and "fused ops" in out
    assert re.search(r"^  speedup\s+\d+\.\d\dx$", out, re.M)
    assert re.search(r"max \|difference\| vs LiteRT builtin kernels: \S+ \(tolerance 1e-04\): ok",
                     out)
    assert saved.read_bytes() == files.demo.read_bytes()
