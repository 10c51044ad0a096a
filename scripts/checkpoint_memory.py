"""Peak memory of writing a checkpoint with ort_cffi's writer, on a synthetic model of many parameters.

    python scripts/checkpoint_memory.py --parameters 100000000 [--tensors 25] [--external] [--folder DIR]

Makes a MatMul chain holding ``--parameters`` float32 parameters in ``--tensors`` square weights, then, in a
fresh process, loads it with onnx (``--external``: saved with external data and loaded without it, as a large
model is) and writes its checkpoint. Prints JSON: the weights' bytes, the
process's resident memory before the write, and its peak during the write (Linux's VmHWM, reset just before
through /proc/self/clear_refs), with their ratio to the weights.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_model(folder: Path, parameters: int, tensors: int, external: bool) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    side = int(math.isqrt(parameters // tensors))
    rng = np.random.default_rng(0)
    nodes, weights, current = [], [], "x"
    for index in range(tensors):
        name = f"layer{index}.weight"
        weights.append(numpy_helper.from_array(rng.standard_normal((side, side), dtype=np.float32), name))
        nodes.append(helper.make_node("MatMul", [current, name], [f"h{index}"]))
        current = f"h{index}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", side])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["N", side])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location="weights.bin")
    return path


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(path: Path, external: bool) -> dict:
    import onnx

    from ort_cffi.artifacts.builder.checkpoint import write_checkpoint

    model = onnx.load(str(path), load_external_data=not external)
    weights = [tensor for tensor in model.graph.initializer]
    size = sum(4 * math.prod(tensor.dims) for tensor in weights)
    before = status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, so the peak below is the write's
    started = time.perf_counter()
    written = write_checkpoint(path.parent / "checkpoint", weights, [],
                               external_data_dir=path.parent if external else None)
    seconds = time.perf_counter() - started
    peak = status_kib("VmHWM") * 1024
    return {"parameters": size // 4, "weights_bytes": size, "checkpoint_bytes": written, "external": external,
            "rss_before_bytes": before, "peak_during_write_bytes": peak, "write_extra_bytes": peak - before,
            "peak_over_weights": round(peak / size, 3), "extra_over_weights": round((peak - before) / size, 3),
            "seconds": round(seconds, 2)}


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parameters", type=int, default=100_000_000)
    parser.add_argument("--tensors", type=int, default=25)
    parser.add_argument("--external", action="store_true")
    parser.add_argument("--folder", type=Path, help="where the model and checkpoint go (default: a temporary folder)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child that measures
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.external)))
        return 0
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.folder or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        path = make_model(folder, args.parameters, args.tensors, args.external)
        child = [sys.executable, __file__, "--measure", str(path)] + (["--external"] if args.external else [])
        result = subprocess.run(child, capture_output=True, text=True, check=False)
        if result.returncode:
            sys.stderr.write(result.stderr)
            return result.returncode
        print(result.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
