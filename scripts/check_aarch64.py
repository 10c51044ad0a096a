"""ort_cffi on aarch64, under qemu-user: run by scripts/check_aarch64.sh in Debian's arm64 CPython 3.11, with
ONNX Runtime's aarch64 inference wheel (``onnxruntime``) installed beside ort_cffi's other dependencies.

No Linux aarch64 training build of ONNX Runtime was ever published: training there runs on ort_cffi's engine
(training over the inference C API). The checks, each run in its own process:

``loader VERSION``: what the loader does by itself, in a real aarch64 process.

- With ``ORT_CFFI_LIBRARY`` and ``ORT_CFFI_BACKEND`` unset, it finds the installed wheel's
  ``capi/libonnxruntime.so.VERSION``, which answers ``VERSION`` and has no training table, so the backend is
  the engine.
- The static finder's answer for that library (``adrp; add; ret`` decoding, ``R_AARCH64_RELATIVE``
  relocations) is the table ``OrtGetApiBase()`` returns at run time.
- The wheel's ``onnxruntime_pybind11_state*.so`` (which exports no C API): its private image, examined
  statically and mapped, holds an ``OrtApiBase`` whose ``GetVersionString()`` answers ``VERSION`` and whose
  ``GetApi`` gives the declared API version's table.
- An inference session through the facade computes what numpy computes.

``train OUT.npz``: the embedded example (the digits MLP, ``ort_cffi/data/digits``) trained through the facade on
the engine: two epochs of AdamW steps at batch 32, at a learning rate of 0.01 set through the API, then the
validation set evaluated and the model exported for inference. The parameters must change, the validation loss
must fall by more than half and the accuracy reach 0.9 (the training build reaches 0.944 with these settings),
and the exported model must give the eval model's logits. The run is recorded in OUT.npz.

``reference OUT.npz`` makes the same run on the host's training build (x86_64, ONNX Runtime 1.19.2), and
``compare A.npz B.npz`` checks that the two runs agree: every step's loss, the final parameters, the accuracy.
``compare-trainer`` does the same for two runs of ``ort-cffi-train`` on the embedded example (the demo's code
path: a linear schedule, checkpoints, the inference export), from their ``metrics.json``.

    python check_aarch64.py loader 1.31.1
    python check_aarch64.py train aarch64.npz          # under qemu
    python check_aarch64.py reference x86_64.npz       # on the host, in .venv
    python check_aarch64.py compare aarch64.npz x86_64.npz
    python check_aarch64.py compare-trainer AARCH64_OUT X86_64_OUT   # two ort-cffi-train --out folders
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "ort_cffi" / "data" / "digits"


def check(condition: bool, what: str) -> None:
    """A failed check ends the run with exit status 1 and says what was expected (asserts vanish under -O)."""
    if not condition:
        raise SystemExit(f"check_aarch64.py: FAILED: {what}")
    print("  ok:", what)


def check_loader(version: str) -> None:
    from ort_cffi import OnnxTensor, OrtEnvironment, backend
    from ort_cffi._native import elf
    from ort_cffi._native.dynlib import find_symbol, open_library
    from ort_cffi._native.loader import RuntimeFile, prepare_image
    from ort_cffi.capi import API_VERSION, ffi, get_runtime

    for name in ("ORT_CFFI_LIBRARY", "ORT_CFFI_BACKEND"):
        check(not os.environ.get(name), f"${name} is unset: the loader decides by itself")
    runtime = get_runtime()
    capi = Path(__import__("importlib.util").util.find_spec("onnxruntime").submodule_search_locations[0]) / "capi"
    print(f"runtime {runtime.version} ({runtime.kind}) from {runtime.library}; known as {runtime.known_as}")
    check(runtime.version == version, f"the runtime found answers {version}")
    check(Path(runtime.library).parent == capi.resolve(), f"it is the installed wheel's library, in {capi}")
    check(runtime.training_api is None, "an inference build: no training table")
    check(backend() == "engine", "the backend chosen is the engine")

    # The static finder against the run time, for the library the loader chose.
    location = elf.find_api_base(runtime.library, version, anchors=["OrtGetApiBase"])
    check(location.machine == "aarch64", "the finder read an aarch64 file")
    handle = open_library(runtime.library)
    get_api_base = find_symbol(handle, "OrtGetApiBase")
    load_base = get_api_base - location.anchor_address
    returned = int(ffi.cast("uintptr_t", ffi.cast("const OrtApiBase*(*)(void)", get_api_base)()))
    check(returned - load_base == location.api_base,
          f"OrtGetApiBase() returns load base + {returned - load_base:#x}, the static finder's {location.api_base:#x}")
    check(returned == int(ffi.cast("uintptr_t", runtime.api_base)), "and it is the table the runtime uses")

    # The wheel's extension module: the loader's whole static path, a private image examined and mapped.
    extension = sorted(capi.glob("onnxruntime_pybind11_state*.so"))
    check(len(extension) == 1, f"the wheel has one extension module ({[e.name for e in extension]})")
    image, record = prepare_image(RuntimeFile(extension[0], "extension", version, "the aarch64 check"))
    located = record["location"]
    image_handle = open_library(str(image))
    image_base = find_symbol(image_handle, located["anchor"]) - located["anchor_address"]
    api_base = ffi.cast("const OrtApiBase*", image_base + located["api_base"])
    answered = ffi.string(api_base.GetVersionString()).decode()
    check(answered == version, f"the extension's private image ({image.name}): OrtApiBase at load base + "
          f"{located['api_base']:#x} answers {answered!r}")
    check(api_base.GetApi(API_VERSION) != ffi.NULL, f"and GetApi({API_VERSION}) gives a table")

    # An inference session through the facade, on the runtime the loader chose.
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal((5, 4)).astype(np.float32)
    env = OrtEnvironment.getEnvironment()
    with env.createSession(model.SerializeToString()) as session, OnnxTensor.createTensor(env, x) as tensor:
        with session.run({"x": tensor}) as result:
            y = np.asarray(result.get(0).getValue())
    check(np.allclose(y, x @ weight + bias, rtol=1e-5, atol=1e-6), "an inference session gives x @ w + b")


def accuracy(session, inputs: np.ndarray, labels: np.ndarray) -> "tuple[float, float, np.ndarray]":
    """The eval model's mean loss, accuracy and logits over a whole split, in one batch."""
    from ort_cffi import OnnxTensor, OrtEnvironment

    env = OrtEnvironment.getEnvironment()
    with OnnxTensor.createTensor(env, inputs) as x, OnnxTensor.createTensor(env, labels) as y:
        with session.evalStep({"input": x, "labels": y}) as result:
            loss = float(np.asarray(result.get(0).getValue()).reshape(-1)[0])
            logits = np.asarray(result.get(1).getValue()).copy()
    return loss, float(np.mean(np.argmax(logits, axis=1) == labels)), logits


def train(out: Path, epochs: int = 2, batch: int = 32, learning_rate: float = 0.01) -> None:
    """Train the embedded example on whichever backend this process has, and record the run in ``out``."""
    import ort_cffi
    from ort_cffi import OnnxTensor, OrtEnvironment

    with np.load(DIGITS / "digits.npz") as data:
        train_x, train_y, val_x, val_y = (data[k] for k in ("train_input", "train_labels", "val_input", "val_labels"))
    env = OrtEnvironment.getEnvironment()
    record = {}
    with env.createTrainingSession(str(DIGITS / "checkpoint"), str(DIGITS / "training_model.onnx"),
                                   str(DIGITS / "eval_model.onnx"), str(DIGITS / "optimizer_model.onnx")) as session:
        print(f"backend {ort_cffi.backend()} on ONNX Runtime {env.getVersion()}, {platform.machine()}")
        session.setLearningRate(learning_rate)
        record["before"] = session.copyParametersToBuffer().copy()
        record["start_loss"], record["start_accuracy"], _ = accuracy(session, val_x, val_y)
        losses = []
        started = time.perf_counter()
        for epoch in range(epochs):
            order = np.random.default_rng(epoch).permutation(len(train_x))
            for first in range(0, len(order) - batch + 1, batch):
                chosen = order[first:first + batch]
                with OnnxTensor.createTensor(env, train_x[chosen]) as x, \
                        OnnxTensor.createTensor(env, train_y[chosen]) as y:
                    with session.trainStep({"input": x, "labels": y}) as result:
                        losses.append(float(np.asarray(result.get(0).getValue()).reshape(-1)[0]))
                session.optimizerStep()
                session.lazyResetGrad()
        per_step = (time.perf_counter() - started) / len(losses)
        record["end_loss"], record["end_accuracy"], logits = accuracy(session, val_x, val_y)
        record["after"] = session.copyParametersToBuffer()
        record["lr"] = session.getLearningRate()
        exported = out.with_suffix(".onnx")
        session.exportModelForInference(str(exported), ["logits"])
    # The exported model, as ort-cffi-predict would run it: the same logits as the eval model's.
    with env.createSession(str(exported)) as inference, OnnxTensor.createTensor(env, val_x) as x:
        with inference.run({"input": x}) as result:
            record["exported_matches_eval"] = np.allclose(np.asarray(result.get(0).getValue()), logits,
                                                          rtol=1e-5, atol=1e-5)
    record["val_count"] = len(val_y)
    record["losses"] = np.array(losses, np.float32)
    record["backend"] = ort_cffi.backend()
    record["version"] = env.getVersion()
    record["machine"] = platform.machine()
    np.savez(out, **record)
    print(f"{epochs} epochs, {len(losses)} steps at batch {batch}, lr {learning_rate}: {per_step * 1000:.1f} ms a step; "
          f"training loss {np.mean(losses[:5]):.3f} (first 5 steps) -> {np.mean(losses[-5:]):.3f} (last 5)")
    print(f"validation: loss {record['start_loss']:.3f} -> {record['end_loss']:.3f}, "
          f"accuracy {record['start_accuracy']:.3f} -> {record['end_accuracy']:.3f}")


def check_training(out: Path) -> None:
    """The run on the engine, here: it trains."""
    train(out)
    run = np.load(out)
    check(str(run["backend"]) == "engine", f"the embedded example trained on the engine ({run['version']})")
    check(bool(np.all(np.isfinite(run["losses"]))), "every training loss is finite")
    check(float(np.max(np.abs(run["after"] - run["before"]))) > 0, "the parameters changed")
    check(float(run["end_loss"]) < 0.5 * float(run["start_loss"]), "the validation loss fell by more than half")
    check(float(run["end_accuracy"]) >= 0.9, "the validation accuracy rose to at least 0.9")
    check(bool(run["exported_matches_eval"]), "the exported inference model gives the eval model's logits")


def compare(engine_run: Path, reference_run: Path, tolerance: float = 1e-5) -> None:
    """The aarch64 engine's run against the same run on the training build (x86_64, by the host's .venv).

    Other kernels (NEON rather than AVX), another runtime (1.31.1 rather than 1.19.2) and the engine's standard
    operators round differently, so the two agree to a tolerance, not bit for bit; docs/internals/runtime.md says
    how closely the engine follows the training build on one machine."""
    engine, reference = np.load(engine_run), np.load(reference_run)
    print(f"{engine['backend']} {engine['version']} on {engine['machine']} against "
          f"{reference['backend']} {reference['version']} on {reference['machine']}")
    check(str(reference["backend"]) == "training-api", "the reference ran on the training build")
    check(np.array_equal(engine["before"], reference["before"]), "both started from the same parameters")
    relative = np.abs(engine["losses"] - reference["losses"]) / np.maximum(np.abs(reference["losses"]), 1e-12)
    worst = int(np.argmax(relative))
    check(float(relative[worst]) <= tolerance, f"every step's loss agrees within {tolerance:g} relative "
          f"(worst: step {worst}, {relative[worst]:.2g})")
    scale = float(np.max(np.abs(reference["after"])))
    difference = float(np.max(np.abs(engine["after"] - reference["after"])))
    check(difference <= tolerance * scale, f"the final parameters agree within {tolerance:g} of their largest "
          f"({difference:.2g})")
    check(abs(float(engine["end_accuracy"]) - float(reference["end_accuracy"])) * int(reference["val_count"]) <= 2,
          f"the validation accuracy agrees within two images ({float(engine['end_accuracy']):.4f}, {float(reference['end_accuracy']):.4f})")


def compare_trainer(engine_out: Path, reference_out: Path, tolerance: float = 1e-5) -> None:
    """ort-cffi-train's runs of the embedded example (the demo's first command): on the engine here, on the training
    build on the host. Its metrics.json records the backend, every step's loss and learning rate (a linear schedule
    with warm-up), each epoch's validation, and the exported inference model's accuracy."""
    import json

    engine, reference = (json.loads((out / "metrics.json").read_text()) for out in (engine_out, reference_out))
    print(f"ort-cffi-train: {engine['runtime']} against {reference['runtime']}")
    check(engine["runtime"]["backend"] == "engine", "ort-cffi-train ran on the engine")
    check(reference["runtime"]["backend"] == "training-api", "the reference ran on the training build")
    check(len(engine["steps"]) == len(reference["steps"]) > 0, f"both made {len(reference['steps'])} steps")
    losses, reference_losses = (np.array([step["loss"] for step in run["steps"]]) for run in (engine, reference))
    relative = np.abs(losses - reference_losses) / np.maximum(np.abs(reference_losses), 1e-12)
    worst = int(np.argmax(relative))
    check(float(relative[worst]) <= tolerance, f"every step's loss agrees within {tolerance:g} relative "
          f"(worst: step {worst + 1}, {relative[worst]:.2g})")
    rates, reference_rates = (np.array([step["lr"] for step in run["steps"]]) for run in (engine, reference))
    check(np.allclose(rates, reference_rates, rtol=1e-6), "the schedule gave the same learning rates")
    accuracy, reference_accuracy = engine["inference"]["val_accuracy"], reference["inference"]["val_accuracy"]
    check(accuracy >= 0.9, f"the exported model's validation accuracy is {accuracy:.4f} (at least 0.9)")
    with np.load(DIGITS / "digits.npz") as data:
        images = len(data["val_labels"])
    check(abs(accuracy - reference_accuracy) * images <= 2, f"within two images of the training build's "
          f"({reference_accuracy:.4f})")
    for name in ("best_checkpoint", "last_checkpoint", "inference_model.onnx"):
        check((engine_out / name).exists(), f"it wrote {name}")


def main() -> None:
    started = time.perf_counter()
    print(f"Python {platform.python_version()} on {platform.machine()} ({sys.executable})")
    if len(sys.argv) == 3 and sys.argv[1] == "loader":
        check_loader(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "train":
        check_training(Path(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "reference":
        train(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare-trainer":
        compare_trainer(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(__doc__.split("\n\n")[-1])
    print(f"{time.perf_counter() - started:.1f} s in this process")


if __name__ == "__main__":
    main()
