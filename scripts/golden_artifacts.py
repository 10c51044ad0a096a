"""The golden data of tests/apps/test_artifacts.py: sha256 of the artifacts made from tests/data/golden_mlp.onnx.

    python scripts/golden_artifacts.py reference   # ONNX Runtime's own generate_artifacts, imported as
                                                    # ONNX Runtime documents it (needs torch installed)
    python scripts/golden_artifacts.py ort_cffi    # ort_cffi.artifacts.generate_artifacts (no torch)

Each prints one JSON object, {configuration: {file: sha256}}. Both must print the same: ort_cffi runs ONNX
Runtime's generator, only with the torch-importing package inits bypassed. Each configuration is generated in
a fresh process: the generator numbers the names it adds (onnx::loss::2) with a counter that a second call in
the same process continues. The reference was run once, in a
separate environment (Python 3.11, torch==2.13.0 CPU, onnxruntime-training-cpu==1.19.2, onnx==1.16.2); the
test keeps its output.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "data" / "golden_mlp.onnx"  # 12-8-3 MLP: fc1.weight, fc1.bias, fc2.weight, fc2.bias

# Each configuration twice: as ort_cffi's arguments (its former defaults, ort_cffi_options, and patterns) and as the explicit
# arguments ONNX Runtime's generate_artifacts needs for the same artifacts.
CONFIGURATIONS = {
    "defaults+nominal": (
        {"nominal_checkpoint": True},
        {"requires_grad": ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], "loss": "CrossEntropyLoss",
         "optimizer": "AdamW", "additional_output_names": ["logits"], "nominal_checkpoint": True},
    ),
    "head-mse-sgd": (
        {"requires_grad": "fc2.*", "frozen_params": ["fc1.weight"], "loss": "mse", "optimizer": "sgd"},
        {"requires_grad": ["fc2.weight", "fc2.bias"], "frozen_params": ["fc1.weight"], "loss": "MSELoss",
         "optimizer": "SGD", "additional_output_names": ["logits"]},
    ),
}


def hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.name != "artifacts.json"}


def reference(out: Path, options: dict) -> None:
    from onnxruntime.training import artifacts  # the documented import: its package init imports torch

    options = dict(options, loss=artifacts.LossType[options["loss"]], optimizer=artifacts.OptimType[options["optimizer"]])
    artifacts.generate_artifacts(str(MODEL), artifact_directory=str(out), **options)


def ort_cffi_options(name: str) -> dict:
    """The ort_cffi arguments of configuration ``name``, with what it leaves to ort_cffi's former defaults asked
    for by name (generate_artifacts' own defaults are ONNX Runtime's): every parameter, cross-entropy, AdamW,
    the model's outputs kept."""
    sys.path.insert(0, str(ROOT))
    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS

    former = {"requires_grad": ALL_PARAMETERS, "loss": "cross-entropy", "optimizer": "adamw",
              "additional_output_names": MODEL_OUTPUTS}
    return dict(former, **CONFIGURATIONS[name][0])


def ours(out: Path, options: dict) -> None:
    sys.path.insert(0, str(ROOT))
    from ort_cffi.artifacts import generate_artifacts

    generate_artifacts(MODEL, artifact_directory=out, **options)


def main() -> int:
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "one":  # one configuration into one folder, in this fresh process
        _, _, how, name, out = sys.argv
        ort_options = CONFIGURATIONS[name][1]
        reference(Path(out), ort_options) if how == "reference" else ours(Path(out), ort_cffi_options(name))
        return 0
    if which not in ("reference", "ort_cffi"):
        print(__doc__, file=sys.stderr)
        return 2
    result = {}
    for name in CONFIGURATIONS:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, __file__, "one", which, name, tmp], check=True, stderr=subprocess.DEVNULL)
            result[name] = hashes(Path(tmp))
    if which == "reference":
        import onnx
        import onnxruntime
        import torch

        result["versions"] = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
                              "python": sys.version.split()[0]}
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
