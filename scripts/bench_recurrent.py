"""The LSTM and GRU training ops: ONNX Runtime 1.19.2's kernels against the engine's lowering of them.

    .venv/bin/python scripts/bench_recurrent.py [--steps 50] [--batch 32] [--input 64] [--hidden 128]
        [--threads 1] [--rounds 5] [--repeats 10] [--inference .cache/ort-inference-1.31.1]

One model per operator: its training op and its gradient op, wired as ONNX Runtime's builder wires them (the
gradient of Y given), at the sizes of the LSTM text classifier of the performance guide (embedding 64, hidden
128, 50 steps, batch 32). Each runs with ``--threads`` intra-op threads (one by default): the kernels and
the lowered model on this process's ONNX Runtime (the training build), and the lowered model on an inference
build in a child process
(``--inference``: an unpacked ``onnxruntime`` wheel, as scripts/test.sh installs 1.31.1). The forms alternate
round by round; each round's time is the median of ``--repeats`` runs, and the table gives the median over
rounds (the minimum beside it: a shared machine is noisy) and the ratio to the kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MICROSOFT = "com.microsoft"

_CHILD = """
import json, sys, time
import numpy as np
import onnxruntime as ort
model, feeds, repeats = sys.argv[1], dict(np.load(sys.argv[2])), int(sys.argv[3])
options = ort.SessionOptions()
options.intra_op_num_threads = int(sys.argv[4])
options.inter_op_num_threads = 1
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
session.run(None, feeds)
times = []
for _ in range(repeats):
    start = time.perf_counter()
    session.run(None, feeds)
    times.append(time.perf_counter() - start)
print(json.dumps({"version": ort.__version__, "ms": float(np.median(times)) * 1e3}))
"""


def pair(op: str, steps: int, batch: int, inputs: int, hidden: int,
         linear_before_reset: int = 0) -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """``op``Training then ``op``Grad, as ONNX Runtime's gradient builder wires them."""
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(hidden)  # torch's initialisation
    feeds = {"X": rng.standard_normal((steps, batch, inputs)).astype(np.float32),
             "W": rng.uniform(-bound, bound, (1, gates * hidden, inputs)).astype(np.float32),
             "R": rng.uniform(-bound, bound, (1, gates * hidden, hidden)).astype(np.float32),
             "B": rng.uniform(-bound, bound, (1, 2 * gates * hidden)).astype(np.float32),
             "dY": rng.standard_normal((steps, 1, batch, hidden)).astype(np.float32)}
    if op == "LSTM":
        nodes = [helper.make_node("LSTMTraining", ["X", "W", "R", "B"], ["Y", "Yh", "Yc", "CA", "IOFC"],
                                  domain=MICROSOFT, hidden_size=hidden),
                 helper.make_node("LSTMGrad", ["X", "W", "R", "", "", "", "Y", "CA", "IOFC", "dY"],
                                  ["dX", "dW", "dR", "dB"], domain=MICROSOFT, hidden_size=hidden)]
    else:
        attrs = dict(hidden_size=hidden, linear_before_reset=linear_before_reset)
        nodes = [helper.make_node("GRUTraining", ["X", "W", "R", "B"], ["Y", "Yh", "ZRH"], domain=MICROSOFT, **attrs),
                 helper.make_node("GRUGrad", ["X", "W", "R", "B", "", "", "Y", "ZRH", "dY"], ["dX", "dW", "dR", "dB"],
                                  domain=MICROSOFT, **attrs)]
    graph = helper.make_graph(
        nodes, f"{op.lower()}_training_step",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "dX", "dW", "dR", "dB")])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)]
    return helper.make_model(graph, opset_imports=opsets), feeds


def in_process(model: onnx.ModelProto, feeds: Dict[str, np.ndarray], repeats: int,
               threads: int) -> Callable[[], float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)

    def timed() -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - start)
        return float(np.median(times)) * 1e3

    return timed


def in_child(model: Path, feeds: Path, inference: Path, repeats: int, threads: int,
             versions: Dict[str, str]) -> Callable[[], float]:
    def timed() -> float:
        env = dict(os.environ, PYTHONPATH=str(inference))
        command = [sys.executable, "-c", _CHILD, str(model), str(feeds), str(repeats), str(threads)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
        versions["child"] = found["version"]
        return float(found["ms"])

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--input", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--inference", type=Path, default=ROOT / ".cache" / "ort-inference-1.31.1")
    args = parser.parse_args()
    import onnxruntime as ort

    from ort_cffi._backends.engine.lowering import lower_training_ops

    print(f"T {args.steps}, batch {args.batch}, input {args.input}, hidden {args.hidden}; {args.threads} thread(s); "
          f"median (min) of {args.rounds} rounds of {args.repeats} runs")
    versions: Dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        for label, op, lbr in (("LSTM", "LSTM", 0), ("GRU, linear_before_reset 1", "GRU", 1),
                               ("GRU, linear_before_reset 0", "GRU", 0)):
            model, feeds = pair(op, args.steps, args.batch, args.input, args.hidden, lbr)
            lowered = lower_training_ops(model)
            forms: Dict[str, Callable[[], float]] = {
                f"kernels, {ort.__version__}": in_process(model, feeds, args.repeats, args.threads),
                f"lowered, {ort.__version__}": in_process(lowered, feeds, args.repeats, args.threads)}
            if (args.inference / "onnxruntime").is_dir():
                path, data = Path(folder) / f"{op}{lbr}.onnx", Path(folder) / f"{op}{lbr}.npz"
                onnx.save(lowered, path)
                np.savez(data, **feeds)
                forms[f"lowered, {args.inference.name}"] = in_child(path, data, args.inference, args.repeats,
                                                                     args.threads, versions)
            found: Dict[str, List[float]] = {name: [] for name in forms}
            for _ in range(args.rounds):
                for name, timed in forms.items():
                    found[name].append(timed())
            base = float(np.median(found[next(iter(forms))]))
            print(f"\n{label}")
            for name, times in found.items():
                median = float(np.median(times))
                print(f"  {name:40s} {median:7.2f} ms ({min(times):6.2f})  {median / base:5.2f}x")
    if versions:
        print(f"\nthe child process ran ONNX Runtime {versions['child']}")


if __name__ == "__main__":
    main()
