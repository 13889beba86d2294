"""How the codegen modules depend on each other: no import circle, and the modules that
analyse or plan a kernel, and claiming, import no numba (only the helpers generated code
imports need it)."""
import ast
import subprocess
import sys

from conftest import ROOT

#: Modules that read or rewrite the IR and plan kernels: importing them must not load numba
#: or llvmlite (claiming and planning run where no kernel is compiled).
ANALYSIS_MODULES = ("ir", "ops", "literals", "composites", "padding", "chains", "schedule",
                    "target", "nests", "fastpath", "lower", "islands", "qparams", "quant_ops",
                    "quant_paths", "quant_prepare", "quant_reference", "quant_support",
                    "quant_rows", "quant_parts", "fixedpoint", "fixedpoint_binary",
                    "fixedpoint_rows", "qcall", "libm")
#: ... and what decides which nodes and partitions to claim.
CLAIMING_MODULES = ("fusion_delegate.claims", "fusion_delegate.features", "fusion_delegate.policy")


def codegen_imports() -> dict[str, set[str]]:
    """Each codegen module -> the codegen modules it imports (at the top or in a function)."""
    graph = {}
    for path in (ROOT / "codegen").glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= ({node.module.split(".")[0]} if node.module else
                             {alias.name for alias in node.names})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("codegen."):
                imported.add(node.module.split(".")[1])
        graph[path.stem] = imported
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as the modules along it, or None (depth-first search)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                return path[path.index(imported):] + [imported]
            if imported not in done:
                found = visit(imported)
                if found:
                    return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = None if module in done else visit(module)
        if found:
            return found
    return None


def test_codegen_has_no_import_circle():
    graph = codegen_imports()
    assert graph["ops"] and graph["lower"], "the import graph must see relative imports"
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_the_cycle_check_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def compilers_loaded(modules: list[str]) -> str:
    """Which of numba and llvmlite a fresh interpreter has loaded after importing `modules`."""
    imports = "; ".join(f"import {name}" for name in modules)
    check = "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", f"import sys; {imports}; {check}"],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_analysis_modules_import_no_numba():
    assert compilers_loaded([f"codegen.{name}" for name in ANALYSIS_MODULES]) == "[]"


def test_claiming_imports_no_numba():
    assert compilers_loaded(list(CLAIMING_MODULES)) == "[]"


def test_the_helpers_kernels_import_do_import_numba():
    """The check above sees numba where it is loaded."""
    assert compilers_loaded(["codegen.fixedpoint_numba"]) == "['llvmlite', 'numba']"
