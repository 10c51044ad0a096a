"""Peak memory of ``ort-cffi-artifacts`` on models of 100M parameters and more, with its load check (the
default) and without it (``--no-check``), against the model's size; and, for comparison, what opening the
artifacts as a trainer does (the real checkpoint, the optimizer: what the check did before issue 38).

Each number is one command in a fresh process, its peak resident set (``/usr/bin/time``'s maximum RSS, or
VmHWM for the session), divided by the model's size on disk (the .onnx file and its external data). Two
models: ``gemm``, the Gemm-ReLU stack of ``bench_zoo.large_model`` (4096-wide layers); ``lm``, a
language-model shape (token embedding, feed-forward blocks, a vocabulary projection, cross-entropy over the
last axis), both with their weights in one external data file.

    python scripts/bench_check.py                 # both models, 100M parameters
    python scripts/bench_check.py --models lm --parameters 150000000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_zoo  # noqa: E402  (scripts/ is no package)


def lm_model(folder: Path, parameters: int) -> Path:
    """Token ids [N, T] -> Gather from a [vocabulary, width] embedding -> feed-forward blocks (MatMul, Relu,
    MatMul, residual Add) -> MatMul to [N, T, vocabulary]: about ``parameters`` float32 parameters, a third
    in the embedding, a third in the projection, a third in the blocks."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    width, hidden = 1024, 4096
    vocabulary = max(1000, parameters // 3 // width)
    blocks = max(1, round(parameters / 3 / (2 * width * hidden)))
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape, dtype=np.float32) * 0.02), name)

    inits = [weight("embedding", vocabulary, width), weight("projection", width, vocabulary)]
    nodes = [helper.make_node("Gather", ["embedding", "ids"], ["h0"])]
    x = "h0"
    for i in range(blocks):
        inits += [weight(f"block{i}.up", width, hidden), weight(f"block{i}.down", hidden, width)]
        nodes += [helper.make_node("MatMul", [x, f"block{i}.up"], [f"u{i}"]),
                  helper.make_node("Relu", [f"u{i}"], [f"a{i}"]),
                  helper.make_node("MatMul", [f"a{i}", f"block{i}.down"], [f"d{i}"]),
                  helper.make_node("Add", [x, f"d{i}"], [f"h{i + 1}"])]
        x = f"h{i + 1}"
    nodes.append(helper.make_node("MatMul", [x, "projection"], ["logits"]))
    graph = helper.make_graph(nodes, "lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", "T"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "T", vocabulary])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "lm.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="lm.onnx.data")
    return path


MAKERS = {"gemm": bench_zoo.large_model, "lm": lm_model}
LOSS = {"gemm": "mse", "lm": "cross-entropy"}
SESSION = """
import json, sys
from ort_cffi import OrtEnvironment
f = sys.argv[1] + "/"
OrtEnvironment.getEnvironment().createTrainingSession(f + "checkpoint", f + "training_model.onnx",
    f + "eval_model.onnx", f + "optimizer_model.onnx").close()
print(json.dumps(1024 * int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])))
"""


def peak_of_command(arguments: list) -> int:
    """The peak RSS in bytes of ``ort-cffi-artifacts ARGUMENTS``, run as its console script does."""
    code = "import sys, ort_cffi_commands; sys.argv[0] = 'ort-cffi-artifacts'; ort_cffi_commands.artifacts()"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(["/usr/bin/time", "-f", "@@peak %M", sys.executable, "-c", code, *map(str, arguments)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-2000:])
    return 1024 * int(done.stderr.rsplit("@@peak ", 1)[1].split()[0])


def measure(kind: str, parameters: int) -> Dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-check-") as work:
        folder = Path(work)
        model = MAKERS[kind](folder, parameters)
        size = sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(model.stem))
        count = sum(int(np.prod(t.dims)) for t in __import__("onnx").load(str(model), load_external_data=False).graph.initializer)
        loss = ["--loss", LOSS[kind]]
        unchecked = peak_of_command([model, "--out", folder / "unchecked", *loss, "--no-check"])
        checked = peak_of_command([model, "--out", folder / "checked", *loss])
        done = subprocess.run([sys.executable, "-c", SESSION, str(folder / "checked")], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-2000:])
        session = json.loads(done.stdout.strip().splitlines()[-1])
    return {"parameters": count, "model_bytes": size, "no_check": unchecked / size, "check": checked / size,
            "training_session": session / size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MAKERS), default=sorted(MAKERS))
    parser.add_argument("--parameters", type=int, default=100_000_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {}
    print(f"{'model':<6} {'parameters':>11} {'size MiB':>9} {'--no-check':>11} {'check':>7} {'training session':>17}")
    for kind in args.models:
        r = results[kind] = measure(kind, args.parameters)
        print(f"{kind:<6} {r['parameters'] / 1e6:>10.1f}M {r['model_bytes'] / 2**20:>9.0f} {r['no_check']:>10.2f}x "
              f"{r['check']:>6.2f}x {r['training_session']:>16.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
