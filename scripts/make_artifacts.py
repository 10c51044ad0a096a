"""Generate the training artifacts ort_cffi ships and tests with (run once; the outputs are committed).

    pip install -e ".[cpu,artifacts]" scikit-learn     # onnxruntime-training-cpu, onnx; no torch
    python scripts/make_artifacts.py

Each model is a small MLP written directly with onnx.helper (deterministic weights from a numpy seed),
turned into ONNX Runtime training artifacts by ``ort_cffi.artifacts.generate_artifacts`` (ONNX Runtime's
own generator, run without torch; cross-entropy loss, AdamW): ``checkpoint``, ``training_model.onnx``,
``eval_model.onnx``, ``optimizer_model.onnx`` and, where asked, ``nominal_checkpoint``. The dataset comes
from scikit-learn.

Compared with the committed files, which this script made when it still called
``onnxruntime.training.artifacts.generate_artifacts`` itself (with torch installed): ``ort_cffi/data/digits``
and every checkpoint come out byte for byte the same. The models of ``tests/artifacts`` differ only in the
numbers of the names the generator adds (``onnx::loss::8`` committed, ``onnx::loss::2`` regenerated): the old
script made all five sets in one process, and ONNX Runtime numbers those names with a counter it never
resets, while ort_cffi runs each generation in a fresh process, as a single call would. The tests name the
committed losses, so those files stay as they are.

- ``ort_cffi/data/digits/``: the command-line trainer's embedded default, 64-64-10 on scikit-learn's
  bundled 8x8 digits, with the data itself as ``digits.npz`` (so training needs neither torch nor
  scikit-learn).
- ``tests/artifacts/tiny``: 784-16-10 (the overhead-bound benchmark model), with a nominal checkpoint.
- ``tests/artifacts/big``: 784-500-10 (the compute-bound benchmark model).
- ``tests/artifacts/twoout``: 20-16-3 whose training and eval models have two outputs (loss, logits).
- ``tests/artifacts/dropout``: 20-16-3 with an always-active dropout, to test ``setSeed``.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
OPSET = 17


def mlp(sizes: "list[int]", seed: int, dropout: float = 0.0) -> onnx.ModelProto:
    """input [batch, sizes[0]] → Gemm/Relu layers → logits [batch, sizes[-1]]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    current = "input"
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        bound = 1.0 / np.sqrt(fan_in)  # torch.nn.Linear's default initialisation
        weight = rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(np.float32)
        bias = rng.uniform(-bound, bound, size=(fan_out,)).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"fc{layer}.weight"), numpy_helper.from_array(bias, f"fc{layer}.bias")]
        last = layer == len(sizes) - 1
        out = "logits" if last else f"hidden{layer}"
        nodes.append(helper.make_node("Gemm", [current, f"fc{layer}.weight", f"fc{layer}.bias"], [out + ("" if last else "_pre")], transB=1))
        if not last:
            nodes.append(helper.make_node("Relu", [out + "_pre"], [out]))
            if dropout:
                inits += [
                    numpy_helper.from_array(np.array(dropout, np.float32), f"drop{layer}.ratio"),
                    numpy_helper.from_array(np.array(True), f"drop{layer}.training"),
                ]
                nodes.append(helper.make_node("Dropout", [out, f"drop{layer}.ratio", f"drop{layer}.training"], [out + "_drop", f"drop{layer}.mask"]))  # the mask output: its gradient needs it
                out += "_drop"
        current = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", sizes[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ort_cffi")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def generate(model: onnx.ModelProto, out_dir: Path, *, nominal: bool = False, extra_outputs: "list[str] | None" = None) -> None:
    sys.path.insert(0, str(ROOT))
    from ort_cffi.artifacts import MANIFEST, generate_artifacts

    if out_dir.exists():
        shutil.rmtree(out_dir)
    generate_artifacts(
        model,
        requires_grad="fc*",  # the layers' weights and biases (not a dropout's ratio)
        loss="cross-entropy",
        optimizer="adamw",
        artifact_directory=out_dir,
        additional_output_names=extra_outputs or [],  # [] is ONNX Runtime's default: the loss only
        nominal_checkpoint=nominal,
    )
    (out_dir / MANIFEST).unlink()  # the shipped folders hold the artifacts only
    print(f"{out_dir.relative_to(ROOT)}: {sorted(p.name for p in out_dir.iterdir())}")


def digits_dataset(out: Path) -> None:
    from sklearn.datasets import load_digits  # pip install scikit-learn

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)  # the loss block takes int64 labels
    order = np.random.default_rng(0).permutation(len(y))
    split = int(0.8 * len(y))
    train, val = order[:split], order[split:]
    np.savez_compressed(
        out,
        train_input=x[train], train_labels=y[train], val_input=x[val], val_labels=y[val],
    )
    print(f"{out.relative_to(ROOT)}: {len(train)} train, {len(val)} validation images")


def main() -> int:
    data = ROOT / "ort_cffi" / "data" / "digits"
    generate(mlp([64, 64, 10], seed=1), data, extra_outputs=["logits"])
    digits_dataset(data / "digits.npz")
    tests = ROOT / "tests" / "artifacts"
    generate(mlp([784, 16, 10], seed=2), tests / "tiny", nominal=True)
    generate(mlp([784, 500, 10], seed=3), tests / "big")
    generate(mlp([20, 16, 3], seed=4), tests / "twoout", extra_outputs=["logits"])
    generate(mlp([20, 16, 3], seed=5, dropout=0.3), tests / "dropout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
