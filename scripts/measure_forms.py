"""Which form ort_cffi's builder writes for each training operator on ONNX Runtime's training build: its
kernel, or the standard form the engine lowers it to. Measures both and rewrites the table the builder reads
(``ort_cffi/data/standard_forms.json``).

    .venv/bin/python scripts/measure_forms.py [--rounds 5] [--repeats 10] [--threads 1] [--ops GatherGrad ...]
        [--dry-run]

Each case is a small model holding the operator as ort_cffi's builder writes it (a training operator and its
gradient operator wired as the builder wires them, or one gradient operator), at the sizes of the models of
the performance guide (docs/guides/performance.md) and of the zoo. It runs as an inference session of the
training build in this process (``.venv``'s onnxruntime-training-cpu 1.19.2), once as it is and once with the
operator measured written in standard operators by the engine's rule (``lower_chosen_ops``), ``--threads``
intra-op threads (one by default). The two alternate round by round; a round's time is the median of
``--repeats`` runs, a case's ratio the median over rounds of standard / kernel, paired per round.

An operator gets the standard form only where every case of it is faster by at least ``--margin`` (ratio
at most 0.9 by default): a shared machine is noisy, and a form a little faster at one size is no gain worth
leaving ONNX Runtime's kernel for. Only ratios from one run are meant to be compared; the table records the
date, the machine, its load and the runtime with them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TABLE = ROOT / "ort_cffi" / "data" / "standard_forms.json"
MICROSOFT = "com.microsoft"
Feeds = Dict[str, np.ndarray]


@dataclass
class Case:
    """One model at one size and the operators whose form it measures (each lowered alone)."""

    label: str
    model: onnx.ModelProto
    feeds: Feeds
    measures: Tuple[str, ...]
    outputs: List[str] = field(default_factory=list)
    size: Optional[int] = None  # the size the form's gain depends on: a batch, or a count of elements
    size_of: Optional[Tuple[int, Optional[int]]] = None  # where: (input of the node, axis; None: all elements)


def _model(name: str, nodes: List[onnx.NodeProto], feeds: Feeds, outputs: Sequence[str],
           constants: Sequence[onnx.TensorProto] = ()) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    graph = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                    for n in outputs], initializer=list(constants))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])


def recurrent(op: str, steps: int, batch: int, inputs: int, hidden: int) -> Case:
    """``op``Training then ``op``Grad as the builder wires them (the gradient of Y given, final states' not):
    what an LSTM or GRU classifier's training graph holds. GRU as torch exports it (linear_before_reset 1)."""
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(hidden)
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
        attrs = dict(hidden_size=hidden, linear_before_reset=1)
        nodes = [helper.make_node("GRUTraining", ["X", "W", "R", "B"], ["Y", "Yh", "ZRH"], domain=MICROSOFT, **attrs),
                 helper.make_node("GRUGrad", ["X", "W", "R", "B", "", "", "Y", "ZRH", "dY"], ["dX", "dW", "dR", "dB"],
                                  domain=MICROSOFT, **attrs)]
    outputs = ["Y", "dX", "dW", "dR", "dB"]
    return Case(f"{op} T {steps}, batch {batch}, input {inputs}, hidden {hidden}",
                _model(op, nodes, feeds, outputs), feeds, (f"{op}Training", f"{op}Grad"), outputs, size=batch,
                size_of=(0, 1))  # the batch: X [T, batch, input], the first input of both operators


def gather_grad(rows: int, width: int, indices_shape: Tuple[int, ...], extra: Tuple[int, ...] = ()) -> Case:
    """GatherGrad along axis 0 of data [rows, *extra, width] (the data's shape a constant, as the builder
    folds a parameter's): an embedding's gradient, or a packed projection's slice."""
    rng = np.random.default_rng(1)
    data_shape = (rows, *extra, width)
    indices = rng.integers(0, rows, indices_shape).astype(np.int64)
    feeds = {"indices": indices, "dY": rng.standard_normal(indices_shape + data_shape[1:]).astype(np.float32)}
    shape = helper.make_tensor("shape", TensorProto.INT64, [len(data_shape)], list(data_shape))
    node = helper.make_node("GatherGrad", ["shape", "indices", "dY"], ["dX"], domain=MICROSOFT, axis=0)
    return Case(f"GatherGrad of {list(data_shape)} at indices {list(indices_shape)}",
                _model("gather_grad", [node], feeds, ["dX"], [shape]), feeds, ("GatherGrad",), ["dX"])


def elementwise(op: str, shape: Tuple[int, ...], second: str = "X", **attributes: float) -> Case:
    """An activation's gradient (inputs dY and X or Y) over ``shape``."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    if second == "Y" and op in ("SigmoidGrad", "TanhGrad"):
        x = np.tanh(x) * 0.5 + (0.5 if op == "SigmoidGrad" else 0.0)
    feeds = {"dY": rng.standard_normal(shape).astype(np.float32), second: x}
    node = helper.make_node(op, ["dY", second], ["dX"], domain=MICROSOFT, **attributes)
    return Case(f"{op} over {list(shape)}", _model(op, [node], feeds, ["dX"]), feeds, (op,), ["dX"],
                size=int(np.prod(shape)), size_of=(0, None))


def softmax(op: str, shape: Tuple[int, ...]) -> Case:
    """SoftmaxGrad_13 / LogSoftmaxGrad_13 along the last axis (inputs dY and the forward's output)."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(shape).astype(np.float32)
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities = shifted / shifted.sum(-1, keepdims=True)
    y = probabilities if op == "SoftmaxGrad_13" else np.log(probabilities)
    feeds = {"dY": rng.standard_normal(shape).astype(np.float32), "Y": y.astype(np.float32)}
    node = helper.make_node(op, ["dY", "Y"], ["dX"], domain=MICROSOFT, axis=-1)
    return Case(f"{op} over {list(shape)}", _model(op, [node], feeds, ["dX"]), feeds, (op,), ["dX"],
                size=int(np.prod(shape)), size_of=(0, None))


def cross_entropy_grad(rows: int, classes: int, *positions: int) -> Case:
    """SoftmaxCrossEntropyLossGrad (mean reduction) as the builder writes the cross-entropy loss's gradient:
    inputs the loss's gradient, the log-probabilities and the labels (``positions``: axes after the classes)."""
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((rows, classes, *positions)).astype(np.float32)
    log_prob = logits - logits.max(1, keepdims=True)
    log_prob = log_prob - np.log(np.exp(log_prob).sum(1, keepdims=True))
    feeds = {"dY": np.array(1.0, np.float32), "log_prob": log_prob.astype(np.float32),
             "labels": rng.integers(0, classes, (rows, *positions)).astype(np.int64)}
    node = helper.make_node("SoftmaxCrossEntropyLossGrad", ["dY", "log_prob", "labels"], ["dX"], domain=MICROSOFT,
                            reduction="mean")
    return Case(f"SoftmaxCrossEntropyLossGrad over {list(log_prob.shape)}",
                _model("cross_entropy_grad", [node], feeds, ["dX"]), feeds, ("SoftmaxCrossEntropyLossGrad",), ["dX"],
                size=log_prob.size, size_of=(1, None))


def cross_entropy(rows: int, classes: int, *positions: int) -> Case:
    """The standard SoftmaxCrossEntropyLoss (mean reduction, outputs the loss and the log-probabilities) as the
    builder's cross-entropy loss block writes it; the logits of a tied-embedding language model's scale (std 11).
    ``positions``: axes after the classes (a per-token or per-pixel loss, [N, C, d...])."""
    rng = np.random.default_rng(6)
    feeds = {"scores": (rng.standard_normal((rows, classes, *positions)) * 11.0).astype(np.float32),
             "labels": rng.integers(0, classes, (rows, *positions)).astype(np.int64)}
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss", "log_prob"], reduction="mean")
    return Case(f"SoftmaxCrossEntropyLoss over {list(feeds['scores'].shape)}",
                _model("cross_entropy", [node], feeds, ["loss", "log_prob"]), feeds, ("SoftmaxCrossEntropyLoss",),
                ["loss", "log_prob"], size=feeds["scores"].size, size_of=(0, None))


def layer_norm_grad(rows: int, width: int) -> Case:
    """LayerNormalizationGrad over the last axis (inputs dY, X, scale, mean, inverse standard deviation)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    feeds = {"dY": rng.standard_normal((rows, width)).astype(np.float32), "X": x,
             "scale": rng.standard_normal((width,)).astype(np.float32),
             "mean": x.mean(-1, keepdims=True), "inv_std": (1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5))}
    node = helper.make_node("LayerNormalizationGrad", ["dY", "X", "scale", "mean", "inv_std"], ["dX", "dS", "dB"],
                            domain=MICROSOFT, axis=-1)
    return Case(f"LayerNormalizationGrad over [{rows}, {width}]", _model("layer_norm_grad", [node], feeds,
                                                                         ["dX", "dS", "dB"]), feeds,
                ("LayerNormalizationGrad",), ["dX", "dS", "dB"])


# The sizes: the performance guide's models (LSTM/GRU classifier: embedding 64, hidden 128, T 50, batch 32;
# the TransformerEncoder: d 128, 4 heads, feed-forward 512, T 64, batch 16, vocabulary 1000; the GPT-like
# model: d 128, T 64, batch 8, vocabulary 2000) and the zoo's (recurrent: T 12-20, batch 16-32, hidden 24-48).
CASES: List[Callable[[], Case]] = [
    lambda: recurrent("LSTM", 50, 32, 64, 128),
    lambda: recurrent("LSTM", 20, 16, 32, 48),
    lambda: recurrent("LSTM", 20, 1, 32, 48),
    lambda: recurrent("LSTM", 20, 4, 32, 48),
    lambda: recurrent("GRU", 50, 32, 64, 128),
    lambda: recurrent("GRU", 20, 16, 32, 48),
    lambda: recurrent("GRU", 20, 1, 32, 48),
    lambda: recurrent("GRU", 20, 4, 32, 48),
    lambda: gather_grad(1000, 128, (16, 64)),
    lambda: gather_grad(2000, 128, (8, 64)),
    lambda: gather_grad(3, 128, (), (64, 16)),
    lambda: elementwise("ReluGrad", (16, 64, 512)),
    lambda: elementwise("ReluGrad", (64, 512)),
    lambda: elementwise("ReluGrad", (16, 512)),
    lambda: elementwise("ReluGrad", (16, 32)),  # the zoo's scikit-learn MLP, hidden 32
    lambda: elementwise("LeakyReluGrad", (16, 64, 512), "Y", alpha=0.01),
    lambda: elementwise("SigmoidGrad", (16, 64, 512), "Y"),
    lambda: elementwise("TanhGrad", (16, 64, 512), "Y"),
    lambda: elementwise("GeluGrad", (8, 64, 512)),
    lambda: elementwise("GeluGrad", (16, 64, 32)),  # the zoo's conv1d_regressor
    lambda: elementwise("FastGeluGrad", (8, 64, 512)),
    lambda: elementwise("FastGeluGrad", (16, 64, 32)),
    lambda: softmax("SoftmaxGrad_13", (16, 4, 64, 64)),
    lambda: softmax("LogSoftmaxGrad_13", (512, 2000)),
    lambda: softmax("LogSoftmaxGrad_13", (32, 10)),
    lambda: cross_entropy(512, 2000),
    lambda: cross_entropy(64, 1000),
    lambda: cross_entropy(16, 100),
    lambda: cross_entropy(32, 10),
    lambda: cross_entropy(16, 128, 16),  # the zoo's gpt2_tiny (per token, classes first)
    lambda: cross_entropy(16, 4, 32, 32),  # the zoo's segnet (per pixel)
    lambda: cross_entropy_grad(512, 2000),
    lambda: cross_entropy_grad(64, 1000),
    lambda: cross_entropy_grad(16, 100),
    lambda: cross_entropy_grad(32, 10),
    lambda: cross_entropy_grad(16, 128, 16),
    lambda: cross_entropy_grad(16, 4, 32, 32),
    lambda: layer_norm_grad(1024, 128),
]


def session_timer(model: onnx.ModelProto, feeds: Feeds, repeats: int, threads: int) -> Callable[[], float]:
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
        return statistics.median(times) * 1e3

    return timed


def measure(case: Case, op: str, rounds: int, repeats: int, threads: int) -> Dict[str, float]:
    """Kernel and standard form of ``op`` in ``case``, alternating: median ms of each, the paired ratio."""
    from ort_cffi._facade.standard_forms import lower_chosen_ops

    lowered, kept = lower_chosen_ops(case.model, {op})
    if kept:
        raise RuntimeError(f"{case.label}: the engine's rule refused {op}")
    kernel = session_timer(case.model, case.feeds, repeats, threads)
    standard = session_timer(lowered, case.feeds, repeats, threads)
    pairs: List[Tuple[float, float]] = []
    for r in range(rounds):
        if r % 2 == 0:
            k, s = kernel(), standard()
        else:
            s, k = standard(), kernel()
        pairs.append((k, s))
    return {"kernel_ms": round(statistics.median(k for k, _ in pairs), 3),
            "standard_ms": round(statistics.median(s for _, s in pairs), 3),
            "ratio": round(statistics.median(s / k for k, s in pairs), 3)}


def choose(cases: List[Dict[str, Any]], margin: float, size_of: Optional[Tuple[int, Optional[int]]]) -> Dict[str, Any]:
    """The form of one operator from its cases: standard where every case's ratio is at most ``margin``. Where
    the cases give sizes (a batch, a count of elements), the standard form from the smallest measured size from
    which every case of that size or larger is that much faster (``from_size``, with ``size_of`` saying where
    the size is; below it the builder keeps the kernel, and where the size is not known when the model is
    built it writes the standard form: ort_cffi/artifacts/builder/standard_forms.py)."""
    worst = max(float(c["ratio"]) for c in cases)
    if worst <= margin:
        return {"form": "standard", "worst_ratio": worst}
    if size_of is not None and all("size" in c for c in cases):
        for smallest in sorted({int(c["size"]) for c in cases}):
            above = max(float(c["ratio"]) for c in cases if int(c["size"]) >= smallest)
            if above <= margin:
                return {"form": "standard", "worst_ratio": above, "from_size": smallest,
                        "size_of": {"input": size_of[0], "axis": size_of[1]}}
    return {"form": "kernel", "worst_ratio": worst}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--margin", type=float, default=0.9, help="the largest ratio that chooses the standard form")
    parser.add_argument("--ops", nargs="*", help="measure only these operators (the others keep their entries)")
    parser.add_argument("--dry-run", action="store_true", help="print the table, do not write it")
    args = parser.parse_args()
    import onnxruntime as ort

    load_before = os.getloadavg()
    print(f"ONNX Runtime {ort.__version__}; {args.threads} thread(s); median of {args.rounds} rounds of "
          f"{args.repeats} runs; load average {load_before}", flush=True)
    found: Dict[str, List[Dict[str, Any]]] = {}
    size_of: Dict[str, Tuple[int, Optional[int]]] = {}
    for make in CASES:
        case = make()
        for op in case.measures:
            if args.ops and op not in args.ops:
                continue
            result = measure(case, op, args.rounds, args.repeats, args.threads)
            found.setdefault(op, []).append(dict(case=case.label, **result,
                                                 **({} if case.size is None else {"size": case.size})))
            if case.size_of is not None:
                size_of[op] = case.size_of
            print(f"  {op:<18} {case.label:<55} kernel {result['kernel_ms']:8.3f} ms  standard "
                  f"{result['standard_ms']:8.3f} ms  {result['ratio']:.2f}x", flush=True)
    table = json.loads(TABLE.read_text()) if TABLE.is_file() else {}
    forms = table.get("forms", {})
    measured = {"date": datetime.date.today().isoformat(), "machine": machine(), "onnxruntime": ort.__version__,
                "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats, "margin": args.margin,
                "load_average": [round(v, 2) for v in load_before + os.getloadavg()]}
    for op, cases in found.items():
        forms[op] = choose(cases, args.margin, size_of.get(op))
        forms[op].update(cases=cases, measured=measured)
    table = {
        "about": "Per ONNX Runtime training operator, the form ort_cffi's builder writes into training models: "
                 "'standard' (the engine's lowering, in standard ONNX operators) where every measured case ran "
                 "faster than the 1.19.2 training build's kernel by the margin (ratio = standard / kernel time), "
                 "else 'kernel'. Written by scripts/measure_forms.py; docs/guides/performance.md says why.",
        "forms": dict(sorted(forms.items())),
    }
    print("\n" + "\n".join(f"{op:<18} {entry['form']:<8} worst ratio {entry['worst_ratio']:.2f}"
                           for op, entry in table["forms"].items()))
    if not args.dry_run:
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
        print(f"written: {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
