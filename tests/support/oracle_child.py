"""The oracle side of tests/guarantees/test_oracle.py: run the same programs through ONNX Runtime's own Python
training layer (``onnxruntime.capi._pybind_state``), in a process of its own.

    python tests/support/oracle_child.py PLAN.json

``PLAN.json`` holds ``{"data": NPZ, "programs": {name: {"artifacts": DIR, "ops": [...]}}, "out": DIR}``;
each program's records go to ``OUT/<name>.npz``, and which runtime made them (its version and build, the
interpreter) to ``OUT/oracle_runtime.json``. The op language (and its ort_cffi interpreter) is
documented in tests/guarantees/test_oracle.py. This file never imports ort_cffi, so no object of one runtime image
can reach the other; it blocks torch (which ``import onnxruntime`` pulls in where installed) so the
child behaves as in CI, where torch is absent.
"""
from __future__ import annotations

import json
import platform
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError

import numpy as np  # noqa: E402
import onnxruntime  # type: ignore[import-untyped]  # noqa: E402
from onnxruntime.capi import _pybind_state as C  # type: ignore[import-untyped]  # noqa: E402


def session_options() -> "C.SessionOptions":
    options = C.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


class Oracle:
    """One training session of the Python layer: a checkpoint state, a Module and an Optimizer."""

    def __init__(self, artifacts: Path, data: "dict[str, np.ndarray]", records: "dict[str, list]") -> None:
        self.artifacts = artifacts
        self.data = data
        self.records = records
        self.device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)
        self.state: Any = None
        self.module: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None

    # --- helpers -------------------------------------------------------------------------------

    def batch(self, key: str, index: int) -> "list[np.ndarray]":
        return [np.ascontiguousarray(self.data[f"{key}_input"][index]), np.ascontiguousarray(self.data[f"{key}_labels"][index])]

    def record(self, tag: str, value) -> None:
        self.records[tag].append(np.asarray(value))

    def record_outputs(self, tag: str, fetches, names: "list[str]") -> None:
        self.records[f"{tag}:names"] = [np.array(names)]
        for j in range(len(fetches)):
            self.record(f"{tag}.{j}", fetches[j].numpy())

    def lr(self) -> np.float32:
        return np.float32(self.optimizer.get_learning_rate())

    # --- ops -----------------------------------------------------------------------------------

    def op_open(self, checkpoint: "str | None" = None) -> None:
        self.close()
        options = session_options()
        self.state = C.load_checkpoint(checkpoint or str(self.artifacts / "checkpoint"))
        self.module = C.Module(
            str(self.artifacts / "training_model.onnx"), self.state, str(self.artifacts / "eval_model.onnx"), self.device, options
        )
        self.optimizer = C.Optimizer(str(self.artifacts / "optimizer_model.onnx"), self.state, self.device, options)

    def op_set_lr(self, lr: float) -> None:
        self.optimizer.set_learning_rate(lr)

    def op_lr(self, tag: str) -> None:
        self.record(tag, self.lr())

    def op_scheduler(self, tag: str, warmup: int, total: int, lr: float) -> None:
        # The native constructor's real order is (optimizer, total, warmup, initial_lr); the public
        # wrapper onnxruntime.training.api.LinearLRScheduler passes warmup and total the wrong way
        # round. Passing them in the native order undoes that.
        self.scheduler = C.LinearLRScheduler(self.optimizer, total, warmup, lr)
        # That constructor sets the initial rate and then applies factor(step count) at once; the C API
        # (RegisterLinearLRScheduler) builds the scheduler first and sets the initial rate after, so the
        # rate stays `lr` until the first SchedulerStep. Setting it back gives the C API's state exactly:
        # initial rate `lr`, current rate `lr`, the same step count.
        self.optimizer.set_learning_rate(lr)
        self.record(tag, self.lr())

    def op_train(self, tag: str, key: str, first: int, count: int, scheduler: bool = False) -> None:
        names = self.module.output_names(True)
        for i in range(first, first + count):
            fetches = C.OrtValueVector()
            self.module.train_step(self.batch(key, i), fetches)
            self.record_outputs(tag, fetches, names)
            self.record(f"{tag}.lr", self.lr())  # the rate this optimizer step uses
            self.optimizer.optimizer_step()
            if scheduler:
                self.scheduler.scheduler_step()
            self.module.lazy_reset_grad()

    def op_eval(self, tag: str, key: str, index: int) -> None:
        fetches = C.OrtValueVector()
        self.module.eval_step(self.batch(key, index), fetches)
        self.record_outputs(tag, fetches, self.module.output_names(False))

    def op_params(self, tag: str) -> None:
        size = self.module.get_parameters_size(True)
        array = np.zeros(size, np.float32)  # the OrtValue wraps it without a copy: keep it alive
        buffer = C.OrtValue.ortvalue_from_numpy(array, self.device)
        self.module.copy_parameters_to_buffer(buffer, True)
        self.record(tag, buffer.numpy().copy())
        del buffer

    def op_save(self, path: str, optimizer_state: bool) -> None:
        C.save_checkpoint(self.state, path, optimizer_state)

    def op_export(self, path: str, names: "list[str]") -> None:
        self.module.export_model_for_inferencing(path, names)

    def op_infer(self, tag: str, model: str, key: str, index: int) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        feeds = dict(zip([i.name for i in session.get_inputs()], self.batch(key, index)))
        outputs = session.run(names, feeds)
        self.records[f"{tag}:names"] = [np.array(names)]
        for j, value in enumerate(outputs):
            self.record(f"{tag}.{j}", value)

    def close(self) -> None:
        self.scheduler = self.optimizer = self.module = self.state = None


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    out = Path(plan["out"])
    with np.load(plan["data"]) as npz:
        data = {k: npz[k] for k in npz.files}
    for name, program in plan["programs"].items():
        records: "dict[str, list]" = defaultdict(list)
        oracle = Oracle(Path(program["artifacts"]), data, records)
        for op, *args in program["ops"]:
            getattr(oracle, f"op_{op}")(*args)
        oracle.close()
        arrays: "dict[str, Any]" = {tag: np.stack(values) for tag, values in records.items()}
        np.savez(out / f"{name}.npz", **arrays)
    runtime = {"onnxruntime": onnxruntime.__version__, "build_info": onnxruntime.get_build_info(),
               "python": platform.python_version(), "executable": sys.executable, "extension": C.__file__}
    (out / "oracle_runtime.json").write_text(json.dumps(runtime, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
