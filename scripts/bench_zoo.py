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

Run as a script it compares ort_cffi's builder with ONNX Runtime's generator (``compare_generators``), and with
``--backends`` the engine (over 1.19.2 and over the current inference build in .cache) with the training build
on the same artifacts (``compare_backends``: a fresh child per backend and round; docs/guides/performance.md).
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
    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

    model = json.loads((ZOO_DIR / "zoo.json").read_text())["models"][name]
    made = generate_artifacts(ZOO_DIR / model["file"], ALL_PARAMETERS, loss=model["loss"], optimizer="adamw",
                              loss_input_names=[model["loss_reads"]], additional_output_names=MODEL_OUTPUTS,
                              artifact_directory=folder / name)
    return made, np.load(ZOO_DIR / model["dataset"]["file"])


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


# --- ort_cffi's own builder against ONNX Runtime's generator (issue 31) -----------------------------------------

GENERATORS = ("ort_cffi", "onnxruntime")
CHILD_GENERATE = """
import json, resource, sys, time
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
kwargs = json.loads(sys.argv[1])
started = time.perf_counter()
# ort_cffi's former defaults, asked for (generate_artifacts' own are ONNX Runtime's); the run's options override them
generate_artifacts(**dict(dict(requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                               additional_output_names=MODEL_OUTPUTS), **kwargs))
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss: this process's own peak (ru_maxrss keeps the parent's size at fork across exec)
own = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # ONNX Runtime's generator's child
print(json.dumps({"seconds": seconds, "peak_bytes": peak * 1024}))
"""
CHILD_STEPS = """
import json, resource, sys
import numpy as np
from ort_cffi import OrtEnvironment, SessionOptions
folder, data_file, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = np.load(data_file)
options = SessionOptions(); options.setIntraOpNumThreads(1); options.setInterOpNumThreads(1)
with OrtEnvironment.getEnvironment().createTrainingSession(
        folder + "/checkpoint", folder + "/training_model.onnx", folder + "/eval_model.onnx",
        folder + "/optimizer_model.onnx", options) as session:
    feeds = {n: data["train_" + n][:%d] for n in session.getTrainInputNames()}
    for _ in range(steps):
        session.trainStep(feeds).close(); session.optimizerStep(); session.lazyResetGrad()
own = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps({"peak_bytes": own * 1024}))
""" % BATCH


def _run_child(code: str, *args: str) -> Dict[str, Any]:
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _step_loop(made_folder: Path, data: Any, keep: List[Any]) -> tuple:
    from ort_cffi import OrtEnvironment, SessionOptions

    options = SessionOptions()
    options.setIntraOpNumThreads(1)
    options.setInterOpNumThreads(1)
    keep.append(options)
    session = OrtEnvironment.getEnvironment().createTrainingSession(
        str(made_folder / "checkpoint"), str(made_folder / "training_model.onnx"), str(made_folder / "eval_model.onnx"),
        str(made_folder / "optimizer_model.onnx"), options)
    keep.append(session)
    feeds = {n: data[f"train_{n}"][:BATCH] for n in session.getTrainInputNames()}
    initial = session.copyParametersToBuffer(True)

    def loop(n: int) -> float:
        loss = math.nan
        for _ in range(n):
            with session.trainStep(feeds) as result:
                loss = float(result.get(0).getValue())
            session.optimizerStep()
            session.lazyResetGrad()
        return loss

    return loop, lambda: session.copyBufferToParameters(initial, True)


def compare_generators(rounds: int, steps: int, models: Any = None) -> dict:
    """Per zoo model that both generators can make: generation time and peak RSS (each in a fresh child
    process), the step time (interleaved blocks in this process, ratio ours/ONNX Runtime's per round) and a
    step's peak RSS (a fresh child each)."""
    zoo = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-builder-") as folder:
        for name in models or sorted(zoo):
            entry = zoo[name]
            made: Dict[str, Any] = {}
            for generator in GENERATORS:
                kwargs = {"model": str(ZOO_DIR / entry["file"]), "loss": entry["loss"],
                          "loss_input_names": [entry["loss_reads"]], "check": False, "generator": generator,
                          "artifact_directory": str(Path(folder) / name / generator)}
                try:
                    made[generator] = _run_child(CHILD_GENERATE, json.dumps(kwargs))
                except RuntimeError as exc:
                    made[generator] = {"error": str(exc)}
            if any("error" in made[g] for g in GENERATORS):
                results[name] = {"skipped": {g: made[g].get("error") for g in GENERATORS if "error" in made[g]}}
                print(f"{name}: not made by both generators, skipped", flush=True)
                continue
            print(f"timing {name}: ort_cffi's artifacts vs ONNX Runtime's...", flush=True)
            data = np.load(ZOO_DIR / entry["dataset"]["file"])
            keep: List[Any] = []
            try:
                loops = {"a": _step_loop(Path(folder) / name / "ort_cffi", data, keep),
                         "c": _step_loop(Path(folder) / name / "onnxruntime", data, keep)}
                timing = _interleaved(loops, rounds, steps)
            finally:
                for handle in reversed(keep):
                    handle.close()
            memory = {g: _run_child(CHILD_STEPS, str(Path(folder) / name / g), str(ZOO_DIR / entry["dataset"]["file"]),
                                    str(steps)) for g in GENERATORS}
            results[name] = {
                "generation_seconds": {g: made[g]["seconds"] for g in GENERATORS},
                "generation_ratio": made["ort_cffi"]["seconds"] / made["onnxruntime"]["seconds"],
                "generation_peak_bytes": {g: made[g]["peak_bytes"] for g in GENERATORS},
                "step_ms": {"ort_cffi": timing["ms_per_step"]["a"]["median"],
                            "onnxruntime": timing["ms_per_step"]["c"]["median"]},
                "step_ratio": timing["ratio_a_c"],
                "step_peak_bytes": {g: memory[g]["peak_bytes"] for g in GENERATORS},
                "step_peak_ratio": memory["ort_cffi"]["peak_bytes"] / memory["onnxruntime"]["peak_bytes"],
                "last_loss": {"ort_cffi": timing["last_loss"]["a"], "onnxruntime": timing["last_loss"]["c"]},
            }
    return results


# --- the engine against the training build (issue 41) --------------------------------------------------------

INFERENCE_LIBRARY = ROOT / ".cache" / "ort-inference-1.31.1" / "onnxruntime" / "capi" / "libonnxruntime.so.1.31.1"
# backend -> the environment a child process gets: the training build (the .venv's 1.19.2), the engine over the
# same 1.19.2 library, and the engine over the current inference build (chosen there automatically).
BACKENDS = {
    "training": {"ORT_CFFI_BACKEND": "training-api", "ORT_CFFI_LIBRARY": ""},
    "engine-1.19.2": {"ORT_CFFI_BACKEND": "engine", "ORT_CFFI_LIBRARY": ""},
    "engine-1.31.1": {"ORT_CFFI_BACKEND": "", "ORT_CFFI_LIBRARY": str(INFERENCE_LIBRARY)},
}
CHILD_BACKEND_STEPS = """
import json, sys, time
import numpy as np
from ort_cffi import OrtEnvironment, SessionOptions
folder, data_file, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = np.load(data_file)
options = SessionOptions(); options.setIntraOpNumThreads(1); options.setInterOpNumThreads(1)
env = OrtEnvironment.getEnvironment()
with env.createTrainingSession(
        folder + "/checkpoint", folder + "/training_model.onnx", folder + "/eval_model.onnx",
        folder + "/optimizer_model.onnx", options) as session:
    feeds = {n: np.ascontiguousarray(data["train_" + n][:%d]) for n in session.getTrainInputNames()}
    loss = float("nan")
    times, cpu_times = [], []
    for i in range(warmup + steps):
        started, cpu_started = time.perf_counter(), time.process_time()
        with session.trainStep(feeds) as result:
            loss = float(result.get(0).getValue())
        session.optimizerStep(); session.lazyResetGrad()
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - cpu_started)
own = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
import ort_cffi
print(json.dumps({"ms_per_step": 1e3 * float(np.median(times[warmup:])),
                  "cpu_ms_per_step": 1e3 * float(np.median(cpu_times[warmup:])), "peak_bytes": own * 1024, "loss": loss,
                  "backend": ort_cffi.backend(), "version": env.getVersion()}))
""" % BATCH


def _run_backend_child(backend: str, folder: Path, data_file: Path, warmup: int, steps: int) -> Dict[str, Any]:
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for key, value in BACKENDS[backend].items():
        if value:
            env[key] = value
        else:
            env.pop(key, None)
    done = subprocess.run([sys.executable, "-c", CHILD_BACKEND_STEPS, str(folder), str(data_file), str(warmup),
                           str(steps)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_backends(rounds: int, steps: int, models: Any = None, generators: Any = ("ort_cffi",),
                     backends: Any = None) -> dict:
    """Per zoo model and generator: each backend's step time (median over the steps after a warm-up, in a
    fresh child process per round, the order rotated every round) and the child's peak RSS; ratios to the
    training build's from the same round, then the median over rounds."""
    backends = list(backends or [b for b in BACKENDS if b != "engine-1.31.1" or INFERENCE_LIBRARY.exists()])
    zoo = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-backends-") as folder:
        for name in models or sorted(zoo):
            entry = zoo[name]
            for generator in generators:
                key = f"{name} ({generator})" if len(generators) > 1 else name
                target = Path(folder) / name / generator
                kwargs = {"model": str(ZOO_DIR / entry["file"]), "loss": entry["loss"],
                          "loss_input_names": [entry["loss_reads"]], "check": False, "generator": generator,
                          "artifact_directory": str(target)}
                try:
                    _run_child(CHILD_GENERATE, json.dumps(kwargs))
                except RuntimeError as exc:
                    results[key] = {"skipped": str(exc)}
                    print(f"{key}: not made, skipped ({exc})", flush=True)
                    continue
                print(f"timing {key} on {', '.join(backends)}...", flush=True)
                data_file = ZOO_DIR / entry["dataset"]["file"]
                runs: Dict[str, List[Dict[str, Any]]] = {b: [] for b in backends}
                errors: Dict[str, str] = {}
                for r in range(rounds):
                    order = backends[r % len(backends):] + backends[:r % len(backends)]
                    for backend in order:
                        if backend in errors:
                            continue
                        try:
                            runs[backend].append(_run_backend_child(backend, target, data_file, 3, steps))
                        except RuntimeError as exc:
                            errors[backend] = str(exc)
                res: Dict[str, Any] = {"errors": errors, "ms_per_step": {}, "cpu_ms_per_step": {}, "peak_bytes": {},
                                       "loss": {}, "step_ratio": {}, "cpu_ratio": {}, "peak_ratio": {}}
                for backend, done in runs.items():
                    if not done:
                        continue
                    res["ms_per_step"][backend] = statistics.median(d["ms_per_step"] for d in done)
                    res["cpu_ms_per_step"][backend] = statistics.median(d["cpu_ms_per_step"] for d in done)
                    res["peak_bytes"][backend] = statistics.median(d["peak_bytes"] for d in done)
                    res["loss"][backend] = done[-1]["loss"]
                    res.setdefault("ran_on", {})[backend] = f"{done[-1]['backend']} on {done[-1]['version']}"
                    if backend != "training" and runs.get("training") and len(runs["training"]) == len(done):
                        res["step_ratio"][backend] = _summary(
                            [d["ms_per_step"] / t["ms_per_step"] for d, t in zip(done, runs["training"])])
                        res["cpu_ratio"][backend] = _summary(
                            [d["cpu_ms_per_step"] / t["cpu_ms_per_step"] for d, t in zip(done, runs["training"])])
                        res["peak_ratio"][backend] = _summary(
                            [d["peak_bytes"] / t["peak_bytes"] for d, t in zip(done, runs["training"])])
                results[key] = res
                print_backends({key: res}, header=False)
    return results


def print_backends(results: dict, header: bool = True) -> None:
    if header:
        print("\nthe engine vs the training build (1.19.2) on the same artifacts: wall and CPU ms per step, peak RSS, "
              "and ratios engine/training (median over rounds, same round paired), one intra-op thread")
    for name, res in results.items():
        if "skipped" in res:
            print(f"  {name:<26} skipped: {res['skipped']}")
            continue
        cells = []
        for backend, ms in res["ms_per_step"].items():
            cell = f"{backend} {ms:7.2f} ms (cpu {res['cpu_ms_per_step'][backend]:7.2f}) " \
                   f"{res['peak_bytes'][backend] / 2**20:5.0f} MiB"
            if backend in res["step_ratio"]:
                cell += (f" [step {res['step_ratio'][backend]['median']:.2f}x, cpu {res['cpu_ratio'][backend]['median']:.2f}x,"
                         f" peak {res['peak_ratio'][backend]['median']:.2f}x]")
            cells.append(cell)
        print(f"  {name:<26} " + " | ".join(cells))
        for backend, error in res["errors"].items():
            print(f"  {'':<26} {backend} failed: {error}")


def large_model(folder: Path, parameters: int) -> Path:
    """A Gemm-ReLU stack of about ``parameters`` float32 parameters (4096-wide layers), saved with its
    weights in one external data file (as a model past protobuf's 2 GB must be)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width = 4096
    layers = max(1, round(parameters / (width * width)))
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width), dtype=np.float32) * 0.01), f"fc{i}.weight"))
        inits.append(numpy_helper.from_array(np.zeros(width, np.float32), f"fc{i}.bias"))
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"h{i}"], transB=1))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info(f"h{layers - 1}", TensorProto.FLOAT, ["N", width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "large.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="large.onnx.data")
    return path


def large_generation(parameters: int) -> dict:
    """Peak RSS of generating the artifacts of a large model, against the model's size (goal: under 2x)."""
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-large-") as folder:
        _run_child("import sys, json; sys.path.insert(0, sys.argv[1]); import bench_zoo; from pathlib import Path; "
                   "bench_zoo.large_model(Path(sys.argv[2]), int(sys.argv[3])); print('{}')",
                   str(ROOT / "scripts"), folder, str(parameters))  # made in a child: this process stays small
        path = Path(folder) / "large.onnx"
        size = path.stat().st_size + (path.parent / "large.onnx.data").stat().st_size
        baseline = _run_child("import json, onnx, ort_cffi.artifacts; print(json.dumps({'peak_bytes': 1024 * int(next("
                              "l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])}))")
        kwargs = {"model": str(path), "loss": "mse", "check": False, "artifact_directory": str(Path(folder) / "out")}
        made = _run_child(CHILD_GENERATE, json.dumps(kwargs))
    return {"model_bytes": size, "parameters": parameters, "seconds": made["seconds"], "peak_bytes": made["peak_bytes"],
            "interpreter_bytes": baseline["peak_bytes"], "peak_over_model": made["peak_bytes"] / size}


def print_generators(results: dict, large: Any) -> None:
    print("\nort_cffi's builder (a) vs ONNX Runtime's generator (c): ratios a/c, one run on this machine")
    print(f"  {'model':<20} {'generate a/c':>13} {'step a/c':>9} {'p25-p75':>15} {'step peak a/c':>14}")
    for name, res in results.items():
        if "skipped" in res:
            print(f"  {name:<20} skipped: {res['skipped']}")
            continue
        ratio = res["step_ratio"]
        print(f"  {name:<20} {res['generation_ratio']:>13.3f} {ratio['median']:>9.3f} "
              f"{ratio['p25']:>7.3f}-{ratio['p75']:<7.3f} {res['step_peak_ratio']:>14.3f}")
    if large:
        print(f"\nlarge model, {large['parameters'] / 1e6:.0f}M parameters ({large['model_bytes'] / 2**20:.0f} MiB): "
              f"generated in {large['seconds']:.1f} s, peak RSS {large['peak_bytes'] / 2**20:.0f} MiB = "
              f"{large['peak_over_model']:.2f}x the model (the interpreter with onnx alone: "
              f"{large['interpreter_bytes'] / 2**20:.0f} MiB)")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="ort_cffi's own gradient builder against ONNX Runtime's generator "
                                     "on the zoo, and generation of a large model (the facade's own bench: "
                                     "scripts/bench.py --zoo-only)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--models", nargs="*", help="zoo models (default: all)")
    parser.add_argument("--large-parameters", type=int, default=100_000_000,
                        help="parameters of the large model (0: skip it)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--backends", action="store_true",
                        help="instead: the engine (on 1.19.2 and on the current inference build) against the "
                        "training build, on the same artifacts (issue 41's performance target)")
    parser.add_argument("--generators", nargs="*", default=["ort_cffi"], choices=GENERATORS,
                        help="with --backends: whose artifacts to time")
    args = parser.parse_args()
    known = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]
    unknown = [m for m in args.models or [] if m not in known]
    if unknown:
        parser.error(f"no zoo model named {', '.join(unknown)}; the zoo has {', '.join(sorted(known))}")
    if args.backends:
        found = compare_backends(args.rounds, args.steps, args.models, args.generators)
        print_backends(found)
        if args.json:
            args.json.write_text(json.dumps({"backends": found}, indent=1) + "\n")
        return
    results = compare_generators(args.rounds, args.steps, args.models)
    large = large_generation(args.large_parameters) if args.large_parameters else None
    print_generators(results, large)
    if args.json:
        args.json.write_text(json.dumps({"zoo": results, "large": large}, indent=1) + "\n")


if __name__ == "__main__":
    main()
