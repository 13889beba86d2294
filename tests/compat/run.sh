#!/usr/bin/env bash
# The delegate under another TFLite runtime: build a fresh virtual environment with RUNTIME at
# VERSION and the numpy/numba that go with it, install this checkout there, and run the tests
# that exercise the runtime: its detection, the structs, model reading and writing, the
# SimpleDelegate lifecycle, fusion, equivalence, and every fused op against the runtime's own
# kernel (tests/compat/test_host_kernels.py). Exits non-zero if anything fails.
#
#   tests/compat/run.sh RUNTIME VERSION [PYTEST_ARGS...]
#   tests/compat/run.sh ai-edge-litert 1.2.0
#   tests/compat/run.sh tflite-runtime 2.14.0
#   tests/compat/run.sh tensorflow-cpu 2.21.0        (or tensorflow)
#
# Dependencies come from pyproject.toml, with RUNTIME==VERSION for its runtime dependency, as a
# user of that runtime installs them (README, "Supported runtimes").
# Environment: COMPAT_DIR (where venvs go, default ${TMPDIR:-/tmp}/fusion-delegate-compat),
# COMPAT_PINS (requirements replacing pyproject's, e.g. "numba==0.61.2 llvmlite==0.44.0"),
# COMPAT_REUSE=1 (reuse the venv a previous run built), PYTHON (default python3).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
runtime=$1 version=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)

older_than() {  # older_than VERSION REFERENCE: VERSION sorts before REFERENCE
  [ "$1" != "$2" ] && [ "$(printf '%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]
}
# What the runtimes below do differently, and the tests that would fail on it for that reason:
# - The equivalence test's oracle is the runtime's kernels: those of ai-edge-litert before 2.1.6,
#   tensorflow and tflite-runtime abort the process on some 6-D broadcasts, and differ from the
#   kernels the delegate reproduces. test_host_kernels.py compares them op by op instead.
equivalence=tests/test_equivalence.py
# - ai-edge-litert 1.x, tensorflow before 2.20 and tflite-runtime prepare the graph's nodes before
#   the delegate's Prepare, which then sees their temporaries as extra tensors.
tensor_count=tests/test_abi.py::test_context_tensors_agree_with_model_file
# - ai-edge-litert 2.1.0 and tensorflow 2.20 report one zero point for a per-channel quantized
#   tensor in get_tensor_details().
zero_points=tests/test_model.py::test_interpreter_tensor_details_agree_with_read_model
# - tflite-runtime crashes on a truncated model, without any delegate: it has no verifier.
truncated=tests/test_simple_delegate.py::test_truncated_model_is_refused_cleanly_with_delegate
# - Depthwise convolutions are claimed only under ai-edge-litert (claims.STENCIL_RUNTIMES): its
#   1.x kernels too are reproduced bit for bit, tflite-runtime 2.14's are not (a NaN sum clamped
#   to FLT_MAX, another int8 rounding). Every runtime runs the test that they are claimed only
#   there; ai-edge-litert 1.x all of them (the main run covers 2.x).
stencil_gate=tests/test_stencil.py::test_convolutions_are_claimed_only_under_the_runtimes_reproduced
stencils=(tests/test_stencil.py tests/test_stencil_int8.py)

tests=(tests/test_runtime.py tests/test_abi.py tests/test_model.py tests/test_simple_delegate.py
       tests/test_fusion.py "$equivalence" tests/compat/test_host_kernels.py tests/test_matmul.py)
leave_out=()
keep_litert=0 add=()
case $runtime in
  ai-edge-litert)
    selected=ai-edge-litert
    if older_than "$version" 2.1.6; then
      leave_out=("$equivalence" "$tensor_count" "$zero_points")
    fi
    if older_than "$version" 2; then tests+=("${stencils[@]}"); else tests+=("$stencil_gate"); fi
    ;;
  tflite-runtime)
    selected=tflite-runtime
    tests+=("$stencil_gate")
    # Its wheel fails to import under numpy 2 (_ARRAY_API not found). It ships no schema module:
    # ai-edge-litert, the default dependency, stays installed for its schema (never imported).
    keep_litert=1 add=("numpy<2")
    leave_out=("$equivalence" "$tensor_count" "$truncated")
    ;;
  tensorflow|tensorflow-cpu)
    selected=tensorflow
    tests+=("$stencil_gate")
    leave_out=("$equivalence")
    if older_than "$version" 2.20; then leave_out+=("$tensor_count"); fi
    case $version in 2.20|2.20.*) leave_out+=("$zero_points") ;; esac
    ;;
  *) echo "unknown runtime $runtime: ai-edge-litert, tflite-runtime, tensorflow(-cpu)" >&2
     exit 2 ;;
esac
args=()
for test in "${tests[@]}"; do
  [ "$test" = "$equivalence" ] && [[ " ${leave_out[*]} " == *" $equivalence "* ]] || args+=("$test")
done
for test in "${leave_out[@]}"; do
  [ "$test" = "$equivalence" ] || args+=(--deselect "$test")
done

venv=${COMPAT_DIR:-${TMPDIR:-/tmp}/fusion-delegate-compat}/$runtime-$version
start=$(date +%s)
echo "== compat: $runtime $version (venv $venv)"
[ ${#leave_out[@]} = 0 ] || echo "   left out here (see tests/compat/run.sh): ${leave_out[*]}"
if [ "${COMPAT_REUSE:-0}" = 1 ] && [ -f "$venv/installed" ]; then
  echo "   reusing the venv (COMPAT_REUSE=1)"
else
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  # pyproject's dependencies and test extra, RUNTIME==VERSION in place of ai-edge-litert (or
  # beside it: tflite-runtime), the runtime's constraints, and COMPAT_PINS in place of
  # pyproject's entries of the same names.
  "$venv/bin/python" - "$root/pyproject.toml" "$keep_litert" "$runtime==$version" "${add[@]}" \
      ${COMPAT_PINS:-} > "$venv/requirements.txt" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
keep_litert, extra = sys.argv[2] == "1", sys.argv[3:]
name = lambda req: re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")
replaced = {name(req) for req in extra} | (set() if keep_litert else {"ai-edge-litert"})
base = [req for req in project["dependencies"] + project["optional-dependencies"]["test"]
        if name(req) not in replaced]
print("\n".join(base + extra))
PY
  # (Output kept in install.log, shown if pip fails: setuptools warns on every editable install.)
  pip=("$venv/bin/python" -m pip install --quiet)
  { "${pip[@]}" --upgrade pip && "${pip[@]}" -r "$venv/requirements.txt" \
      && "${pip[@]}" --no-deps -e "$root"; } \
    > "$venv/install.log" 2>&1 \
    || { cat "$venv/install.log"; echo "== compat: $runtime $version: install FAILED"; exit 1; }
  touch "$venv/installed"
fi
installed=$(date +%s)
"$venv/bin/python" -m pip list 2>/dev/null \
  | grep -iE "^(ai-edge-litert|tflite-runtime|tensorflow|tensorflow-cpu|numba|llvmlite|numpy) " \
  | tr -s ' ' | paste -sd, - | sed 's/,/, /g; s/^/   /'

cd "$root"
status=0
FUSION_DELEGATE_RUNTIME=$selected NUMBA_CACHE_DIR="$venv/numba-cache" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}" "$@" || status=$?
end=$(date +%s)
echo "== compat: $runtime $version: $([ $status = 0 ] && echo passed || echo FAILED)" \
     "(install $((installed - start)) s, tests $((end - installed)) s)"
exit $status
