"""Denormal numbers (docs/guides/performance.md): ort_cffi's trainer, Flower and ``ort_cffi.api`` flush them to
zero by default, the Java facade keeps ONNX Runtime's default, and ``$ORT_CFFI_FLUSH_DENORMALS=0`` (or the
options' own entry) keeps them.

That the option reaches the runtime is seen from the outside: ONNX Runtime sets the flush mode of the thread
that creates the process's first session from that session's options, and numpy in the same thread then
flushes too (1e-39 * 1 gives 0). So each case runs in a fresh interpreter, on both backends.
"""
from __future__ import annotations

import json

import pytest

from conftest import ARTIFACTS, run_child
from ort_cffi import SessionOptions
from ort_cffi._facade import denormals

TINY = ARTIFACTS / "tiny"
# The training-api parameter needs the training build loaded (the engine legs leave it out).
BACKENDS = (pytest.param("training-api", marks=pytest.mark.needs_training_build), "engine")
# The child makes its sessions the way each application does, then reports whether its own thread flushes.
PROBE = """
import json, sys
import numpy as np
how, tiny = sys.argv_how, sys.argv_tiny
if how == "java":
    from ort_cffi import OrtEnvironment, SessionOptions
    with SessionOptions() as options:
        session = OrtEnvironment.getEnvironment().createTrainingSession(
            tiny + "/checkpoint", tiny + "/training_model.onnx", tiny + "/eval_model.onnx",
            tiny + "/optimizer_model.onnx", options)
elif how == "api":
    from ort_cffi.api import CheckpointState, Module
    state = CheckpointState.load_checkpoint(tiny + "/checkpoint")
    module = Module(tiny + "/training_model.onnx", state, tiny + "/eval_model.onnx")
elif how == "flower":
    from ort_cffi.flower.model import GlobalModel
    model = GlobalModel()  # the packaged digits artifacts and data
import ort_cffi
flushed = float(np.full(1, 1e-39, np.float32)[0] * np.float32(1)) == 0.0
print(json.dumps({"flushed": flushed, "backend": ort_cffi.backend()}))
"""


def _probe(how: str, backend: str, **env: str) -> dict:
    code = PROBE.replace("sys.argv_how", repr(how)).replace("sys.argv_tiny", repr(str(TINY)))
    done = run_child(code, env={"ORT_CFFI_BACKEND": backend, **env})
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_java_facade_keeps_the_runtime_default(backend):
    found = _probe("java", backend)
    assert found == {"flushed": False, "backend": backend}


@pytest.mark.parametrize("backend", BACKENDS)
def test_api_module_flushes_by_default_and_opts_out(backend):
    assert _probe("api", backend) == {"flushed": True, "backend": backend}
    assert _probe("api", backend, ORT_CFFI_FLUSH_DENORMALS="0") == {"flushed": False, "backend": backend}


@pytest.mark.parametrize("backend", BACKENDS)
def test_flower_flushes_by_default_and_opts_out(backend):
    assert _probe("flower", backend) == {"flushed": True, "backend": backend}
    assert _probe("flower", backend, ORT_CFFI_FLUSH_DENORMALS="off") == {"flushed": False, "backend": backend}


def test_apply_adds_the_entry_unless_the_options_or_the_user_decide(monkeypatch):
    monkeypatch.delenv(denormals.ENVIRONMENT_VARIABLE, raising=False)
    with SessionOptions() as options:
        assert denormals.apply(options, True)
        assert options.getConfigEntries() == {denormals.CONFIG_KEY: "1"}
    with SessionOptions() as options:
        options.addConfigEntry(denormals.CONFIG_KEY, "0")  # the caller's own choice wins
        assert not denormals.apply(options, True)
        assert options.getConfigEntries() == {denormals.CONFIG_KEY: "0"}
    with SessionOptions() as options:
        assert not denormals.apply(options, False)
        assert options.getConfigEntries() == {}
    monkeypatch.setenv(denormals.ENVIRONMENT_VARIABLE, "0")
    assert not denormals.wanted()
    monkeypatch.setenv(denormals.ENVIRONMENT_VARIABLE, "maybe")
    with pytest.raises(ValueError, match="ORT_CFFI_FLUSH_DENORMALS"):
        denormals.wanted()


def test_the_trainer_flushes_unless_told_to_keep(tmp_path):
    code = """
    import json, sys
    import numpy as np
    from ort_cffi.trainer.job import TrainingJob, settings_from
    keep = {keep}
    settings = dict(out={out!r}, epochs=1, threads=1, progress=False, no_plot=True)
    if keep:
        settings["flush_denormals"] = False
    TrainingJob(settings_from(settings)).run()
    print(json.dumps(float(np.full(1, 1e-39, np.float32)[0] * np.float32(1)) == 0.0))
    """
    for keep, expected in ((False, True), (True, False)):
        done = run_child(code.format(keep=keep, out=str(tmp_path / f"run{keep}")))
        assert json.loads(done.stdout.strip().splitlines()[-1]) is expected
