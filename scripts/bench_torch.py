"""A training step of ort_cffi against PyTorch eager on the architectures people fine-tune (issue 40).

torch is never a dependency of ort_cffi: this script runs in a virtual environment of its own, and the
ort_cffi side runs in the project's ``.venv`` (its children). Make the environment once:

    python3.11 -m venv .venv-bench                 # .venv-* is ignored by git
    .venv-bench/bin/pip install torch==2.13.0 "onnx<1.17" "numpy<2.3"   # the CPU wheel kept on this machine
    .venv-bench/bin/pip install --no-deps onnxscript==0.7.2 onnx_ir==1.1.0 ml_dtypes==0.7.0 packaging
                                                    # torch's default (dynamo) exporter, and what onnxscript imports

    .venv-bench/bin/python scripts/bench_torch.py --threads 1 2 --rounds 3

What it does, per model (``MODELS``):

1. exports it with the TorchScript exporter (opset 17, ``dynamo=False``, training mode, no constant folding)
   and with torch's default exporter (``dynamo=True``); an export that fails is reported, not hidden;
2. makes training artifacts with ort_cffi's builder (``generate_artifacts``, cross-entropy over the logits);
3. times, in fresh processes, alternating in each round: torch eager (zero_grad, forward, cross-entropy,
   backward, AdamW step) and ort_cffi through the facade (trainStep, optimizerStep, lazyResetGrad) on each
   backend (the 1.19.2 training build; the engine on the current inference build; ``training-kernels``: the
   training build on artifacts made with ``standard_forms=False``, ONNX Runtime's gradient kernels everywhere,
   which shows what the builder's standard forms gain there), at each thread count,
   AdamW at lr 1e-4 on both sides, the same batch every step. Each child runs ``--steps`` steps and drops
   the first five; reported are the median ms per step over rounds and the ratio ort_cffi / torch paired
   per round (its median). Denormals are kept on both sides (ONNX Runtime's and torch's defaults);
   ``--flush`` adds ort_cffi with ``session.set_denormal_as_zero`` and torch with ``set_flush_denormal``;
4. prints ONNX Runtime's per-operator profile (the training session's kernels, ms per step) for the
   ``--profile`` slowest models by ratio.

Only ratios from one run are meant to be compared; say the machine's load with them (it is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ORT_PYTHON = ROOT / ".venv" / "bin" / "python"
INFERENCE_LIBRARY = ROOT / ".cache" / "ort-inference-1.31.1" / "onnxruntime" / "capi" / "libonnxruntime.so.1.31.1"
LEARNING_RATE = 1e-4
DROPPED = 5  # warm-up steps left out of each child's median
BACKENDS = {
    "training": {"ORT_CFFI_BACKEND": "training-api", "ORT_CFFI_LIBRARY": ""},
    "engine": {"ORT_CFFI_BACKEND": "", "ORT_CFFI_LIBRARY": str(INFERENCE_LIBRARY)},
    # the training build on artifacts with ONNX Runtime's kernels everywhere (generate_artifacts(...,
    # standard_forms=False)): what the builder's standard forms gain there (ort_cffi/data/standard_forms.json)
    "training-kernels": {"ORT_CFFI_BACKEND": "training-api", "ORT_CFFI_LIBRARY": ""},
}
KERNEL_FORMS = "training-kernels"


# --- the models (torch side; built only in the torch environment) ----------------------------------------------

def build(name: str) -> Tuple[Any, Dict[str, np.ndarray], np.ndarray, int]:
    """(module, inputs by name, labels, classes) for ``name``, seeded: every process builds the same."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

        def forward(self, x):
            return self.net(x)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
            self.stages = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2), Block(64, 128, 2), Block(128, 256, 2))
            self.head = nn.Linear(256, 10)

        def forward(self, x):
            return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int = 4) -> None:
            super().__init__()
            mid = cin * expand
            self.use_skip = stride == 1 and cin == cout
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.body(x)
            return x + y if self.use_skip else y

    class MobileNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
            self.blocks = nn.Sequential(Inverted(16, 24, 2), Inverted(24, 24, 1), Inverted(24, 32, 2),
                                        Inverted(32, 32, 1), Inverted(32, 64, 2), Inverted(64, 96, 1))
            self.head = nn.Linear(96, 10)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))

    class Encoder(nn.Module):
        def __init__(self, vocabulary: int = 1000, d: int = 128, causal: bool = False, tied: bool = False,
                     activation: str = "relu", classes: int = 10) -> None:
            super().__init__()
            self.causal, self.tied = causal, tied
            self.embed = nn.Embedding(vocabulary, d)
            self.position = nn.Parameter(torch.randn(1, 64, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, activation=activation, batch_first=True,
                                               norm_first=True)
            self.layers = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = None if tied else nn.Linear(d, classes)

        def forward(self, tokens):
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position[:, :t]
            mask = torch.triu(torch.full((t, t), float("-inf")), 1) if self.causal else None
            h = self.norm(self.layers(h, mask=mask))
            if self.tied:
                return (h @ self.embed.weight.t()).reshape(-1, self.embed.weight.shape[0])
            return self.head(h.mean(dim=1))

    class Recurrent(nn.Module):
        def __init__(self, cell: str) -> None:
            super().__init__()
            self.embed = nn.Embedding(1000, 64)
            self.rnn = getattr(nn, cell)(64, 128, batch_first=True)
            self.head = nn.Linear(128, 10)

        def forward(self, tokens):
            out, _ = self.rnn(self.embed(tokens))
            return self.head(out[:, -1])

    if name == "mlp":
        return MLP(), {"x": rng.standard_normal((64, 784)).astype(np.float32)}, rng.integers(0, 10, 64), 10
    if name == "resnet":
        return ResNet(), {"x": rng.standard_normal((16, 3, 32, 32)).astype(np.float32)}, rng.integers(0, 10, 16), 10
    if name == "mobilenet":
        return MobileNet(), {"x": rng.standard_normal((16, 3, 96, 96)).astype(np.float32)}, rng.integers(0, 10, 16), 10
    if name == "encoder":
        return Encoder(), {"tokens": rng.integers(0, 1000, (16, 64))}, rng.integers(0, 10, 16), 10
    if name in ("lstm", "gru"):
        return (Recurrent(name.upper()), {"tokens": rng.integers(0, 1000, (32, 50))}, rng.integers(0, 10, 32), 10)
    if name == "gpt":
        model = Encoder(vocabulary=2000, causal=True, tied=True, activation="gelu")
        return model, {"tokens": rng.integers(0, 2000, (8, 64))}, rng.integers(0, 2000, 8 * 64), 2000
    raise ValueError(f"no model {name!r}; the models are {', '.join(MODELS)}")


MODELS = {
    "mlp": "MLP 784-512-512-10, batch 64",
    "resnet": "ResNet-style CNN (4 stages, BatchNorm), 32x32, batch 16",
    "mobilenet": "MobileNet-style (depthwise, BatchNorm, ReLU6), 96x96, batch 16",
    "encoder": "TransformerEncoder, 4 pre-norm layers, d 128, 4 heads, ReLU, T 64, batch 16",
    "lstm": "LSTM text classifier (embedding 64, hidden 128, T 50), batch 32",
    "gru": "GRU text classifier (the same sizes), batch 32",
    "gpt": "GPT-like causal LM (4 layers, d 128, GELU, tied embeddings, vocabulary 2000, T 64), batch 8",
}


def export(name: str, exporter: str, folder: Path) -> Path:
    import warnings

    import torch

    model, inputs, _, _ = build(name)
    model.train()
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    path = folder / f"{name}_{exporter}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=list(inputs), output_names=["logits"],
                              opset_version=17, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
        else:
            torch.onnx.export(model, args, input_names=list(inputs), output_names=["logits"],
                              dynamo=True, verbose=False).save(str(path))
    return path


# --- children ---------------------------------------------------------------------------------------------------

def torch_child(name: str, threads: int, steps: int, flush: bool) -> Dict[str, float]:
    import torch

    torch.set_num_threads(threads)
    torch.set_flush_denormal(flush)
    model, inputs, labels, _ = build(name)
    model.train()
    feeds = [torch.from_numpy(a) for a in inputs.values()]
    target = torch.from_numpy(labels.astype(np.int64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(model(*feeds), target)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
    return {"ms": 1e3 * statistics.median(times[DROPPED:]), "loss": float(loss)}


def ort_child(folder: str, data: str, threads: int, steps: int, flush: bool, profile: str) -> Dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import ort_cffi
    from ort_cffi import OrtEnvironment, SessionOptions

    arrays = dict(np.load(data))
    env = OrtEnvironment.getEnvironment()
    with SessionOptions() as options:
        options.setIntraOpNumThreads(threads)
        options.setInterOpNumThreads(1)
        if flush:
            options.addConfigEntry("session.set_denormal_as_zero", "1")
        if profile:
            options.enableProfiling(profile)
        session = env.createTrainingSession(folder + "/checkpoint", folder + "/training_model.onnx",
                                            folder + "/eval_model.onnx", folder + "/optimizer_model.onnx", options)
    with session:
        session.setLearningRate(LEARNING_RATE)
        feeds = {n: arrays[n] if n in arrays else arrays["__labels__"] for n in session.getTrainInputNames()}
        times, loss = [], float("nan")
        for _ in range(steps):
            started = time.perf_counter()
            with session.trainStep(feeds) as result:
                loss = float(result.get(0).getValue())
            session.optimizerStep()
            session.lazyResetGrad()
            times.append(time.perf_counter() - started)
    return {"ms": 1e3 * statistics.median(times[DROPPED:]), "loss": loss, "backend": ort_cffi.backend(),
            "version": env.getVersion()}


def generate_child(model: str, folder: str, standard_forms: bool) -> Dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

    generate_artifacts(model, loss="cross-entropy", loss_input_names=["logits"], artifact_directory=folder,
                       check=False,
                       requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                       standard_forms=standard_forms)
    return {}


def _child(python: Path, args: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    full = dict(os.environ, PYTHONPATH=str(ROOT))
    for key, value in (env or {}).items():
        if value:
            full[key] = value
        else:
            full.pop(key, None)
    done = subprocess.run([str(python), __file__, *args], capture_output=True, text=True, env=full)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the run ----------------------------------------------------------------------------------------------------

def profile_ops(folder: Path, data: Path, backend: str, steps: int, out: Path) -> List[Tuple[str, float, int]]:
    prefix = out / f"profile_{folder.name}_{backend}"
    _child(ORT_PYTHON, ["_ort", str(folder), str(data), "1", str(steps), "0", str(prefix)], BACKENDS[backend])
    per: Dict[str, float] = {}
    calls: Dict[str, int] = {}
    for file in out.glob(prefix.name + "*.json"):
        # The engine's training and eval sessions share the options, so both may write one file name: read
        # the first document
        events, _ = json.JSONDecoder().raw_decode(file.read_text())
        for event in events:
            if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
                op = event["args"].get("op_name", "?")
                per[op] = per.get(op, 0.0) + event["dur"] / 1e3 / steps
                calls[op] = calls.get(op, 0) + 1
    return sorted(((op, ms, calls[op] // steps) for op, ms in per.items()), key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--exporters", nargs="*", default=["torchscript", "dynamo"], choices=["torchscript", "dynamo"])
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--flush", action="store_true", help="also time both sides with denormals flushed")
    parser.add_argument("--profile", type=int, default=2, help="per-operator profiles of the N slowest models")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    results: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ort-cffi-bench-torch-") as tmp:
        folder = Path(tmp)
        for name in args.models:
            _, inputs, labels, _ = build(name)
            data = folder / f"{name}.npz"
            np.savez(data, __labels__=labels.astype(np.int64), **inputs)
            for exporter in args.exporters:
                key = f"{name}/{exporter}"
                try:
                    model = export(name, exporter, folder)
                    _child(ORT_PYTHON, ["_generate", str(model), str(folder / key.replace("/", "_")), "1"])
                    if KERNEL_FORMS in args.backends:
                        _child(ORT_PYTHON, ["_generate", str(model), str(folder / (key.replace("/", "_") + "_k")), "0"])
                except Exception as exc:  # noqa: BLE001 - an export or generation that fails is a result too
                    results[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                    print(f"{key}: {results[key]['error']}", flush=True)
                    continue
                results[key] = {"artifacts": str(folder / key.replace("/", "_")), "data": str(data), "runs": {}}
            for threads in args.threads:
                variants = [("torch", False)] + [(b, False) for b in args.backends]
                if args.flush:
                    variants += [("torch", True)] + [(b, True) for b in args.backends]
                keys = [k for k in results if k.startswith(name + "/") and "error" not in results[k]]
                for r in range(args.rounds):
                    order = variants if r % 2 == 0 else variants[::-1]
                    for side, flush in order:
                        label = f"{side}{' flush' if flush else ''} t{threads}"
                        if side == "torch":
                            found = _child(Path(sys.executable), ["_torch", name, str(threads), str(args.steps),
                                                                  str(int(flush))])
                            for key in keys:
                                results[key]["runs"].setdefault(label, []).append(found)
                            continue
                        for key in keys:
                            artifacts = results[key]["artifacts"] + ("_k" if side == KERNEL_FORMS else "")
                            try:
                                found = _child(ORT_PYTHON, ["_ort", artifacts, str(data), str(threads),
                                                            str(args.steps), str(int(flush)), ""], BACKENDS[side])
                            except RuntimeError as exc:
                                found = {"error": str(exc)}
                            results[key]["runs"].setdefault(label, []).append(found)
                for key in keys:
                    print_model(key, results[key], threads)
        print_table(results, args.threads, args.backends, args.flush)
        slowest = sorted(((ratio_of(res, "training", 1, False) or 0, key) for key, res in results.items()
                          if "error" not in res), reverse=True)[:args.profile]
        for ratio, key in slowest:
            res = results[key]
            for backend in args.backends:
                artifacts = Path(res["artifacts"] + ("_k" if backend == KERNEL_FORMS else ""))
                ops = profile_ops(artifacts, Path(res["data"]), backend, 12, folder)
                total = sum(ms for _, ms, _ in ops)
                print(f"\nprofile of {key} on {backend} (1 thread, ort_cffi/torch {ratio:.2f}): kernels {total:.1f} ms "
                      "per step")
                for op, ms, calls in ops[:10]:
                    print(f"  {op:<32} {ms:8.2f} ms {calls:4d} calls")
                res.setdefault("profile", {})[backend] = ops[:20]
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def ratio_of(res: Dict[str, Any], backend: str, threads: int, flush: bool) -> Optional[float]:
    suffix = f"{' flush' if flush else ''} t{threads}"
    ours, theirs = res["runs"].get(backend + suffix, []), res["runs"].get("torch" + suffix, [])
    pairs = [o["ms"] / t["ms"] for o, t in zip(ours, theirs) if "ms" in o and "ms" in t]
    return statistics.median(pairs) if pairs else None


def median_ms(res: Dict[str, Any], label: str) -> Optional[float]:
    runs = [r["ms"] for r in res["runs"].get(label, []) if "ms" in r]
    return statistics.median(runs) if runs else None


def print_model(key: str, res: Dict[str, Any], threads: int) -> None:
    cells = []
    for label in res["runs"]:
        if not label.endswith(f"t{threads}"):
            continue
        ms = median_ms(res, label)
        errors = [r["error"] for r in res["runs"][label] if "error" in r]
        cells.append(f"{label}: {ms:.1f} ms" if ms is not None else f"{label}: failed ({errors[0]})")
    print(f"  {key:<24} " + " | ".join(cells), flush=True)


def print_table(results: Dict[str, Any], threads: List[int], backends: List[str], flush: bool) -> None:
    print("\nort_cffi / torch eager, ms per step (median over rounds; ratio paired per round)")
    header = ["model/exporter"]
    for t in threads:
        header += [f"torch t{t}"] + [f"{b} t{t}" for b in backends]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key, res in results.items():
        if "error" in res:
            print(f"| {key} | {res['error']} |")
            continue
        cells = [key]
        for t in threads:
            torch_ms = median_ms(res, f"torch t{t}")
            cells.append(f"{torch_ms:.1f}" if torch_ms else "-")
            for b in backends:
                ms, ratio = median_ms(res, f"{b} t{t}"), ratio_of(res, b, t, False)
                cells.append(f"{ms:.1f} ({ratio:.2f}x)" if ms and ratio else "failed")
        print("| " + " | ".join(cells) + " |")
    if flush:
        print("\nwith denormals flushed (torch.set_flush_denormal, session.set_denormal_as_zero):")
        for key, res in results.items():
            if "error" in res:
                continue
            cells = []
            for t in threads:
                for side in ["torch"] + backends:
                    ms = median_ms(res, f"{side} flush t{t}")
                    cells.append(f"{side} t{t} {ms:.1f}" if ms else f"{side} t{t} -")
            print(f"  {key:<24} " + " | ".join(cells))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_torch":
        print(json.dumps(torch_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")))
    elif len(sys.argv) > 1 and sys.argv[1] == "_ort":
        print(json.dumps(ort_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1",
                                   sys.argv[7])))
    elif len(sys.argv) > 1 and sys.argv[1] == "_generate":
        print(json.dumps(generate_child(sys.argv[2], sys.argv[3], sys.argv[4] == "1")))
    else:
        main()
