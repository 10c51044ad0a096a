"""The start-up half of ort_cffi's benchmark (scripts/bench.py runs it first, in child processes):

- **import + load**: ``import ort_cffi`` and loading the runtime in a fresh interpreter, with a cold
  image cache (an empty ``ORT_CFFI_CACHE_DIR``: the runtime file is read statically and copied) and
  a warm one (the same folder again); whether a child process was started, and whether onnxruntime
  or torch were imported (none of them should be);
- **first training step**: a fresh process that imports, loads the tiny MLP's artifacts and trains
  one step (trainStep, optimizerStep, lazyResetGrad), through ort_cffi and through ONNX Runtime's
  own Python layer (``onnxruntime.training.api``, which imports torch): seconds to the step and
  peak resident memory, as ratios in the same run. The reference runs in an interpreter where
  torch and the training wheel are installed (``--torch-python``; by default ``.cache/bench-torch``,
  created on first use with ``torch==2.13.0``, the local CPU wheel);
- **tensor RSS**: the extra resident memory of a tensor over a 256 MiB array (it must not copy).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "artifacts" / "tiny"
MIB = 2**20
TORCH_VENV = ROOT / ".cache" / "bench-torch"

_CHILD_IMPORT = r"""
import json, subprocess, sys, time
started = []
def record_child(*args, **kwargs):
    started.append(args[0] if args else kwargs.get("args"))
    raise RuntimeError("no child process expected")
subprocess.Popen = record_child
t0 = time.perf_counter()
from ort_cffi.capi import get_runtime
rt = get_runtime()
t1 = time.perf_counter()
print(json.dumps({"import_load_s": t1 - t0, "version": rt.version, "kind": rt.kind, "child_processes": len(started),
                  "onnxruntime_imported": "onnxruntime" in sys.modules, "torch_imported": "torch" in sys.modules}))
"""

_CHILD_RSS = r"""
import json, os, time
import numpy as np
from ort_cffi import OnnxTensor, OrtEnvironment
env = OrtEnvironment.getEnvironment()
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
OnnxTensor.createTensor(env, np.zeros(4, np.float32)).close()  # one-time set-up (memory info), not counted
big = np.ones(64 * 2**20, np.float32)  # 256 MiB, every page touched: resident before the tensor
before = rss()
t0 = time.perf_counter()
tensor = OnnxTensor.createTensor(env, big)
t1 = time.perf_counter()
after = rss()
info = tensor.getInfo()
after_info = rss()
tensor.close()
print(json.dumps({"array_bytes": big.nbytes, "rss_before": before, "rss_after_create": after,
                  "rss_after_getinfo": after_info, "create_s": t1 - t0, "shape": list(info.shape)}))
"""

# Both first-step children: the clock starts before the first import; peak RSS from /proc.
_PEAK = r"""
def peak_rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
"""

_CHILD_FIRST_STEP_ORT_CFFI = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
from ort_cffi import OrtEnvironment
art = sys.argv[1] + "/"
env = OrtEnvironment.getEnvironment()
session = env.createTrainingSession(art + "checkpoint", art + "training_model.onnx", art + "eval_model.onnx",
                                    art + "optimizer_model.onnx")
rng = np.random.default_rng(0)
batch = {"input": rng.standard_normal((4, 784)).astype(np.float32), "labels": rng.integers(0, 10, 4).astype(np.int64)}
with session.trainStep(batch) as result:
    loss = float(result.get(0).getValue())
session.optimizerStep()
session.lazyResetGrad()
t1 = time.perf_counter()
""" + _PEAK + r"""
print(json.dumps({"first_step_s": t1 - t0, "peak_rss_mib": peak_rss_mib(), "loss": loss,
                  "torch_imported": "torch" in sys.modules}))
"""

_CHILD_FIRST_STEP_ORT = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
from onnxruntime.training.api import CheckpointState, Module, Optimizer
art = sys.argv[1] + "/"
state = CheckpointState.load_checkpoint(art + "checkpoint")
module = Module(art + "training_model.onnx", state, art + "eval_model.onnx", device="cpu")
optimizer = Optimizer(art + "optimizer_model.onnx", module)
module.train()
rng = np.random.default_rng(0)
loss = float(module(rng.standard_normal((4, 784)).astype(np.float32), rng.integers(0, 10, 4).astype(np.int64)))
optimizer.step()
module.lazy_reset_grad()
t1 = time.perf_counter()
""" + _PEAK + r"""
print(json.dumps({"first_step_s": t1 - t0, "peak_rss_mib": peak_rss_mib(), "loss": loss,
                  "torch_imported": "torch" in sys.modules}))
"""


def run_child(code: str, env: Optional[Dict[str, str]] = None, python: Optional[str] = None,
              args: Tuple[str, ...] = ()) -> Tuple[dict, float]:
    """Run ``python -c code args``; (its last stdout line as JSON, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.run([python or sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child process failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def measure_import(warm_runs: int) -> dict:
    """Import + runtime load in fresh interpreters: cold (empty image cache), then warm (same folder)."""
    _, python_wall = run_child("print('{}')")  # interpreter start-up alone, for reference
    with tempfile.TemporaryDirectory(prefix="ort_cffi_bench_cache_") as cache:
        env = dict(os.environ, ORT_CFFI_CACHE_DIR=cache)
        cold, cold_wall = run_child(_CHILD_IMPORT, env)
        warm = []
        for _ in range(warm_runs):
            result, wall = run_child(_CHILD_IMPORT, env)
            warm.append({**result, "child_wall_s": wall})
    return {
        "python_startup_wall_s": python_wall,
        "cold": {**cold, "child_wall_s": cold_wall},
        "warm_runs": warm,
        "warm_import_load_s": statistics.median(w["import_load_s"] for w in warm),
        "warm_child_wall_s": statistics.median(w["child_wall_s"] for w in warm),
    }


def measure_rss() -> dict:
    result, wall = run_child(_CHILD_RSS)
    result["extra_rss_bytes"] = result["rss_after_create"] - result["rss_before"]
    result["extra_rss_mib"] = result["extra_rss_bytes"] / MIB
    result["child_wall_s"] = wall
    return result


def torch_python(explicit: Optional[str]) -> str:
    """An interpreter where ``onnxruntime.training.api`` (and so torch) imports."""
    if explicit:
        return explicit
    python = TORCH_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {TORCH_VENV} (torch==2.13.0 and onnxruntime-training-cpu==1.19.2) for the reference...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TORCH_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "torch==2.13.0", "onnxruntime-training-cpu==1.19.2"], check=True)
    return str(python)


def measure_first_step(reps: int, reference_python: Optional[str]) -> dict:
    """Fresh processes to their first training step: ort_cffi (warm image cache) against ONNX
    Runtime's Python layer, alternated ``reps`` times; medians and their ratios."""
    reference = torch_python(reference_python)
    with tempfile.TemporaryDirectory(prefix="ort_cffi_bench_cache_") as cache:
        env = dict(os.environ, ORT_CFFI_CACHE_DIR=cache)
        run_child(_CHILD_IMPORT, env)  # warm the image cache, as any second run finds it
        ours: List[dict] = []
        theirs: List[dict] = []
        for _ in range(reps):
            result, wall = run_child(_CHILD_FIRST_STEP_ORT_CFFI, env, args=(str(TINY),))
            ours.append({**result, "child_wall_s": wall})
            result, wall = run_child(_CHILD_FIRST_STEP_ORT, dict(os.environ), python=reference, args=(str(TINY),))
            theirs.append({**result, "child_wall_s": wall})

    def median(runs: List[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    summary = {}
    for key in ("first_step_s", "child_wall_s", "peak_rss_mib"):
        summary[key] = {"ort_cffi": median(ours, key), "onnxruntime": median(theirs, key)}
        summary[key]["ratio"] = summary[key]["ort_cffi"] / summary[key]["onnxruntime"]
    return {"reference_python": reference, "runs_ort_cffi": ours, "runs_onnxruntime": theirs, "median": summary,
            "same_first_loss": ours[0]["loss"] == theirs[0]["loss"]}


def print_startup(results: dict) -> None:
    imp = results.get("import")
    if imp:
        cold, warm = imp["cold"], imp["warm_runs"]
        print("\nimport ort_cffi + load the runtime, fresh interpreter (python start-up alone: "
              f"{imp['python_startup_wall_s'] * 1e3:.0f} ms wall)")
        print(f"  cold cache: {cold['import_load_s']:.3f} s in the child, {cold['child_wall_s']:.3f} s child wall "
              f"(child processes started: {cold['child_processes']})")
        print(f"  warm cache: {imp['warm_import_load_s']:.3f} s in the child, {imp['warm_child_wall_s']:.3f} s child wall "
              f"(median of {len(warm)}; onnxruntime imported: {warm[0]['onnxruntime_imported']}, "
              f"torch imported: {warm[0]['torch_imported']})")
    first = results.get("first_step")
    if first:
        m = first["median"]
        print(f"\nfresh process to its first training step (tiny MLP), median of {len(first['runs_ort_cffi'])}: "
              "ort_cffi vs ONNX Runtime's Python layer (onnxruntime.training.api, imports torch)")
        for key, label, unit in (("first_step_s", "in-process time", "s"), ("child_wall_s", "process wall", "s"),
                                 ("peak_rss_mib", "peak RSS", "MiB")):
            print(f"  {label:<16} {m[key]['ort_cffi']:9.3f} {unit:<4} vs {m[key]['onnxruntime']:9.3f} {unit:<4} "
                  f"ratio {m[key]['ratio']:.3f}")
        print(f"  first losses identical: {first['same_first_loss']}; torch imported: ort_cffi "
              f"{first['runs_ort_cffi'][0]['torch_imported']}, onnxruntime {first['runs_onnxruntime'][0]['torch_imported']}")
    rss = results.get("tensor_rss")
    if rss:
        print(f"\ntensor over a 256 MiB array: +{rss['extra_rss_mib']:.3f} MiB RSS ({rss['extra_rss_bytes'] // 1024} KiB), "
              f"created in {rss['create_s'] * 1e6:.0f} us")
