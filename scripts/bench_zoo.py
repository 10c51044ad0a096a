"""The per-step ratio of ort_cffi's facade to ONNX Runtime's own Python layer on real models (part of
scripts/bench.py; ``--zoo-only`` runs it alone).

Three models of the zoo (tests/zoo, exported by torch and transformers) whose steps do real work, unlike the
bench's MLPs: a ResNet with BatchNorm whose running statistics are extra outputs of the training model, an
LSTM over token ids, and a BERT with three integer inputs. Their artifacts are generated into a temporary
folder by ``ort_cffi.artifacts.generate_artifacts`` (as ``ort-cffi-train`` makes them). For each, the two
loops run interleaved in blocks, the order reversed every other round, each block from the checkpoint's
parameters, one intra-op thread each:

    a   the facade: trainStep over tensors made once, the loss read from the Result, optimizerStep,
        lazyResetGrad
    c   ONNX Runtime's Python layer (onnxruntime.capi._pybind_state): train_step_with_ort_values over
        OrtValues made once, optimizer_step, lazy_reset_grad

Reported: the median time per step of each and the paired ratio a/c (same round), median and p25-p75.
Only ratios are meant to be compared: this machine is shared and noisy.
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = ROOT / "tests" / "zoo"
ZOO_MODELS = ("resnet_preserve", "lstm_text", "bert_tiny")
BATCH = 16


def _summary(values: List[float]) -> Dict[str, float]:
    ordered = sorted(values)
    p25, _, p75 = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) >= 2 else (ordered[0],) * 3
    return {"median": statistics.median(ordered), "p25": p25, "p75": p75, "n": len(ordered)}


def _generate(name: str, folder: Path) -> Any:
    from ort_cffi.artifacts import generate_artifacts

    model = json.loads((ZOO_DIR / "zoo.json").read_text())["models"][name]
    return generate_artifacts(ZOO_DIR / model["file"], loss=model["loss"], loss_input_names=[model["loss_reads"]],
                              artifact_directory=folder / name), np.load(ZOO_DIR / model["dataset"]["file"])


def _loops(made: Any, data: Any, C: Any, keep: List[Any]) -> Dict[str, tuple]:
    """name -> (loop(n) returning the last loss, reset to the checkpoint's parameters)."""
    from ort_cffi import OnnxTensor, OrtEnvironment, SessionOptions

    env = OrtEnvironment.getEnvironment()
    paths = [str(made.checkpoint), str(made.training_model), str(made.eval_model), str(made.optimizer_model)]
    options = SessionOptions()
    options.setIntraOpNumThreads(1)
    options.setInterOpNumThreads(1)
    session = env.createTrainingSession(*paths, options)
    options.close()
    arrays = {n: np.ascontiguousarray(data[f"train_{n}"][:BATCH]) for n in session.getTrainInputNames()}
    tensors = {n: OnnxTensor.createTensor(env, a) for n, a in arrays.items()}
    keep += [session, *tensors.values()]
    initial = session.copyParametersToBuffer(True)
    keep.append(initial)

    def loop_a(n: int) -> float:
        loss = math.nan
        for _ in range(n):
            with session.trainStep(tensors) as result:
                loss = float(result.get(0).getValue())
            session.optimizerStep()
            session.lazyResetGrad()
        return loss

    options_c = C.SessionOptions()
    options_c.intra_op_num_threads = 1
    options_c.inter_op_num_threads = 1
    device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
    state_c = C.load_checkpoint(paths[0])
    module_c = C.Module(paths[1], state_c, paths[2], device, options_c)
    optimizer_c = C.Optimizer(paths[3], state_c, device, options_c)
    feeds_c = C.OrtValueVector()
    values_c = [C.OrtValue.ortvalue_from_numpy(arrays[n], device) for n in module_c.input_names(True)]
    for value in values_c:
        feeds_c.push_back(value)
    fetches_c = C.OrtValueVector()
    initial_c = np.zeros(module_c.get_parameters_size(True), np.float32)
    initial_value_c = C.OrtValue.ortvalue_from_numpy(initial_c, device)  # over initial_c: both kept below
    module_c.copy_parameters_to_buffer(initial_value_c, True)
    keep.append([options_c, device, state_c, module_c, optimizer_c, arrays, feeds_c, values_c, fetches_c,
                 initial_c, initial_value_c])

    def loop_c(n: int) -> float:
        loss = math.nan
        for _ in range(n):
            module_c.train_step_with_ort_values(feeds_c, fetches_c)
            loss = float(fetches_c[0].numpy())
            optimizer_c.optimizer_step()
            module_c.lazy_reset_grad()
        return loss

    return {"a": (loop_a, lambda: session.copyBufferToParameters(initial, True)),
            "c": (loop_c, lambda: module_c.copy_buffer_to_parameters(initial_value_c, True))}


def _interleaved(loops: Dict[str, tuple], rounds: int, steps: int) -> dict:
    for loop, reset in loops.values():  # warm-up: first-step allocations and the memory arena
        reset()
        loop(steps)
    per_step: Dict[str, List[float]] = {name: [] for name in loops}
    losses: Dict[str, float] = {}
    names = list(loops)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            loop, reset = loops[name]
            reset()
            t0 = time.perf_counter()
            losses[name] = loop(steps)
            per_step[name].append((time.perf_counter() - t0) / steps * 1e3)
    return {"ms_per_step": {name: _summary(v) for name, v in per_step.items()},
            "ratio_a_c": _summary([a / c for a, c in zip(per_step["a"], per_step["c"])]),
            "last_loss": losses, "rounds": rounds, "steps_per_block": steps, "batch": BATCH}


def measure_zoo(C: Any, rounds: int, steps: int, models=ZOO_MODELS) -> dict:
    """The facade against ONNX Runtime's Python layer on the zoo's models: per model, ms per step and a/c."""
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-zoo-") as folder:
        for name in models:
            print(f"timing the zoo's {name} (facade vs ONNX Runtime's Python layer)...", flush=True)
            made, data = _generate(name, Path(folder))
            keep: List[Any] = []
            try:
                results[name] = _interleaved(_loops(made, data, C, keep), rounds, steps)
            finally:
                for handle in reversed(keep):
                    if hasattr(handle, "close"):
                        handle.close()
    return results


def print_zoo(zoo: dict) -> None:
    if not zoo:
        return
    first = next(iter(zoo.values()))
    print(f"\nzoo models, batch {first['batch']}: {first['rounds']} rounds x {first['steps_per_block']} steps per block, "
          "facade (a) vs ONNX Runtime's Python layer (c)")
    print(f"  {'model':<18} {'(a) ms/step':>12} {'(c) ms/step':>12} {'a/c median':>11} {'p25-p75':>15}")
    for name, res in zoo.items():
        a, c, ratio = res["ms_per_step"]["a"], res["ms_per_step"]["c"], res["ratio_a_c"]
        print(f"  {name:<18} {a['median']:>12.3f} {c['median']:>12.3f} {ratio['median']:>11.3f} "
              f"{ratio['p25']:>7.3f}-{ratio['p75']:<7.3f}")
