"""Checks of the engine's lowering (ort_cffi/_backends/engine/lowering): a model of one training operator runs
on the training build's own Python layer (ONNX Runtime 1.19.2, whose CPU kernels are the reference), its
lowered form runs there too and on ONNX Runtime 1.31.1 (an inference build, in a child process: its
``onnxruntime`` package cannot share a process with 1.19.2's), and the results agree."""
from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import pytest
from conftest import ROOT
from onnx import TensorProto, helper

from ort_cffi._backends.engine.lowering import lower_training_ops
from ort_cffi._backends.engine.lowering.registry import CONTRIB_TARGETS, MICROSOFT

# ORT_CFFI_TEST_ORT_VERSION (scripts/check_versions.py) runs the lowered forms on another inference release
CURRENT_VERSION = os.environ.get("ORT_CFFI_TEST_ORT_VERSION") or "1.31.1"
# scripts/test.sh fetches the cp311 wheel there; another interpreter gets its own wheel beside it
CURRENT_DIR = ROOT / ".cache" / (f"ort-inference-{CURRENT_VERSION}" if sys.version_info[:2] == (3, 11) else
                                 f"ort-inference-{CURRENT_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}")
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.float16): TensorProto.FLOAT16}


def ensure_current_runtime() -> Path:
    """The folder holding onnxruntime 1.31.1's wheel, fetched as scripts/test.sh fetches it where missing."""
    if not (CURRENT_DIR / ".complete").is_file():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                        "--target", str(CURRENT_DIR), "--python-version",
                        f"{sys.version_info[0]}.{sys.version_info[1]}", "--platform",
                        "manylinux_2_28_x86_64", f"onnxruntime=={CURRENT_VERSION}"], check=True)
        (CURRENT_DIR / ".complete").touch()
    return CURRENT_DIR


def one_node_model(op_type: str, feeds: Dict[str, np.ndarray], outputs: Sequence[Tuple[str, Any, Optional[Sequence[Any]]]],
                   *, domain: str = MICROSOFT, opset: int = 17, inputs: Optional[Sequence[str]] = None,
                   constants: Optional[Dict[str, np.ndarray]] = None, symbolic: bool = False,
                   **attributes: Any) -> onnx.ModelProto:
    """A model of one ``op_type`` node. ``feeds`` become graph inputs of their exact shapes; ``constants`` become
    initializers; ``inputs`` orders the node's inputs ("" for an omitted one; default: feeds then constants);
    ``outputs`` are (name, numpy dtype, shape or None); ""-named outputs are left unused. With ``symbolic``
    the feeds' sizes are not declared (each a named dimension), so that a lowering works them out at run time."""
    constants = constants or {}
    names = list(inputs) if inputs is not None else list(feeds) + list(constants)
    node = helper.make_node(op_type, names, [o[0] for o in outputs], domain=domain, name=f"the_{op_type}",
                            **attributes)
    graph = helper.make_graph(
        [node], f"one_{op_type}",
        [helper.make_tensor_value_info(n, ELEM[v.dtype], [f"{n}_{i}" for i in range(v.ndim)] if symbolic
                                       else list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(name, ELEM[np.dtype(dtype)], None if shape is None else list(shape))
         for name, dtype, shape in outputs if name],
        [onnx.numpy_helper.from_array(v, n) for n, v in constants.items()])
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MICROSOFT, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def run_training_build(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """The outputs of ``model`` on ONNX Runtime 1.19.2's training build (this process's ``onnxruntime``: the
    tests that use it are marked needs_onnxruntime_python)."""
    import onnxruntime

    assert importlib.util.find_spec("onnxruntime.training") is not None, (
        f"the reference is the training build's kernels; this onnxruntime ({onnxruntime.__version__}) has none")

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


_SERVER = r"""
import pickle, struct, sys
import onnxruntime
assert onnxruntime.__version__ == sys.argv[1], onnxruntime.__version__
read, write = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = read.read(8)
    if not head:
        break
    model, feeds = pickle.loads(read.read(struct.unpack("<Q", head)[0]))
    try:
        options = onnxruntime.SessionOptions()
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        answer = ("ok", session.run(None, feeds))
    except Exception as error:
        answer = ("error", f"{type(error).__name__}: {error}")
    data = pickle.dumps(answer)
    write.write(struct.pack("<Q", len(data)) + data)
    write.flush()
"""


class CurrentRuntime:
    """ONNX Runtime 1.31.1 in a child process that runs the models it is sent."""

    def __init__(self) -> None:
        folder = ensure_current_runtime()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen([sys.executable, "-c", _SERVER, CURRENT_VERSION], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, cwd=str(folder))

    def run(self, model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        assert self.process.stdin is not None and self.process.stdout is not None
        data = pickle.dumps((model.SerializeToString(), feeds))
        self.process.stdin.write(struct.pack("<Q", len(data)) + data)
        self.process.stdin.flush()
        head = self.process.stdout.read(8)
        assert head, f"onnxruntime {CURRENT_VERSION}'s child process ended"
        status, value = pickle.loads(self.process.stdout.read(struct.unpack("<Q", head)[0]))
        if status != "ok":
            raise AssertionError(f"onnxruntime {CURRENT_VERSION} refused the lowered model: {value}")
        return list(value)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def assert_close(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float, where: str,
                 floor: float = 1e-30) -> None:
    """Each output within ``rtol`` of its largest magnitude, or within ``floor`` (for gradients that are zero
    but for rounding, whose noise is all there is to compare)."""
    assert len(got) == len(expected), where
    for index, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, f"{where}, output {index}: {g.dtype}{g.shape} != {e.dtype}{e.shape}"
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e, err_msg=f"{where}, output {index}")
        else:
            scale = float(np.max(np.abs(e))) if e.size else 0.0
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale + floor, err_msg=f"{where}, output {index}")


def check_lowering(model: onnx.ModelProto, feeds: Dict[str, np.ndarray], current: CurrentRuntime,
                   rtol: float = 1e-5, exact: bool = False, intra_op_threads: int = 1) -> onnx.ModelProto:
    """Run ``model`` (its training operator) and its lowered form (for sessions of ``intra_op_threads``
    threads) on 1.19.2 and the lowered form on 1.31.1; all agree within ``rtol`` relative to each output's
    largest magnitude (bit for bit with ``exact``)."""
    expected = run_training_build(model, feeds)
    lowered = lower_training_ops(model, intra_op_threads)

    assert not [n.op_type for n in lowered.graph.node if n.domain == MICROSOFT and n.op_type not in CONTRIB_TARGETS], \
        "a training operator remains"
    tolerance = 0.0 if exact else rtol
    assert_close(run_training_build(lowered, feeds), expected, tolerance, "lowered, on 1.19.2")
    assert_close(current.run(lowered, feeds), expected, tolerance, f"lowered, on {CURRENT_VERSION}")
    return lowered


@pytest.fixture(scope="module")
def current_runtime() -> Iterator[CurrentRuntime]:
    """ONNX Runtime 1.31.1 in a child process, for a test module (import this fixture into it)."""
    runtime = CurrentRuntime()
    yield runtime
    runtime.close()
