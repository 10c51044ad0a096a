"""A model's metadata: ``OrtSession.getMetadata()`` (Java's ``OnnxModelMetadata``) and ``InferenceSession``'s
``get_modelmeta()``, ``get_provider_options()`` and ``set_providers()``, compared with ONNX Runtime's own
``InferenceSession`` where its Python layer runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_child
from onnx import TensorProto, helper

from ort_cffi import OnnxModelMetadata, OrtClosedException, OrtEnvironment
from ort_cffi.api import InferenceSession

CUSTOM = {"classes": '["cat", "dog"]', "author": "Zoë", "empty": ""}


def model_with_metadata(path: Path, custom: "dict[str, str] | None" = None) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu graph",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              doc_string="the graph's own words")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="ort_cffi tests", producer_version="1", domain="ai.example",
                              model_version=7, doc_string="a model with metadata")
    if custom:
        helper.set_model_props(model, custom)
    onnx.save(model, str(path))
    return path


def test_the_facade_reads_every_field(tmp_path: Path) -> None:
    path = model_with_metadata(tmp_path / "m.onnx", CUSTOM)
    with OrtEnvironment.getEnvironment().createSession(str(path)) as session:
        metadata = session.getMetadata()
    assert isinstance(metadata, OnnxModelMetadata)
    assert (metadata.getProducerName(), metadata.getGraphName(), metadata.getGraphDescription(), metadata.getDomain(),
            metadata.getDescription(), metadata.getVersion()) == (
        "ort_cffi tests", "relu graph", "the graph's own words", "ai.example", "a model with metadata", 7)
    assert metadata.getCustomMetadata() == CUSTOM  # still readable after the session closed
    assert metadata.getCustomMetadataValue("author") == "Zoë" and metadata.getCustomMetadataValue("none") is None
    metadata.getCustomMetadata()["author"] = "changed"  # a copy each time
    assert metadata.getCustomMetadataValue("author") == "Zoë"


def test_a_model_without_metadata_gives_empty_fields(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "bare.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    with OrtEnvironment.getEnvironment().createSession(str(path)) as session:
        metadata = session.getMetadata()
    # ONNX Runtime answers INT64_MAX for a model that sets no model_version, and ort_cffi passes it on
    assert metadata.getCustomMetadata() == {} and metadata.getDescription() == "" and metadata.getVersion() == 2**63 - 1


def test_a_closed_session_says_so(tmp_path: Path) -> None:
    session = OrtEnvironment.getEnvironment().createSession(str(model_with_metadata(tmp_path / "m.onnx")))
    session.close()
    with pytest.raises(OrtClosedException):
        session.getMetadata()


def test_set_providers_makes_the_session_again(tmp_path: Path) -> None:
    session = InferenceSession(str(model_with_metadata(tmp_path / "m.onnx", CUSTOM)))
    assert session.get_provider_options() == {"CPUExecutionProvider": {}}
    session.set_providers(["CPUExecutionProvider"])
    out = session.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0]
    assert out.tolist() == [0.0, 2.0] and session.get_modelmeta().custom_metadata_map == CUSTOM
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        session.set_providers(["NoSuchExecutionProvider"])


PORT = """
import json, sys
{header}
session = InferenceSession({path!r}, providers=["CPUExecutionProvider"])
meta = session.get_modelmeta()
print(json.dumps({{"fields": [meta.producer_name, meta.graph_name, meta.graph_description, meta.domain,
                              meta.description, meta.version], "custom": meta.custom_metadata_map,
                  "provider_options": {{k: dict(v) for k, v in session.get_provider_options().items()}}}}))
"""
HEADERS = {
    "onnxruntime": 'sys.modules["torch"] = None  # as in CI, where torch is absent\nfrom onnxruntime import InferenceSession',
    "ort_cffi": "from ort_cffi.api import InferenceSession",
}


@pytest.mark.needs_onnxruntime_python
def test_get_modelmeta_matches_onnx_runtimes(tmp_path: Path) -> None:
    path = str(model_with_metadata(tmp_path / "m.onnx", CUSTOM))
    found = {}
    for name, header in HEADERS.items():
        proc = run_child(PORT.format(header=header, path=path))
        found[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["ort_cffi"]["fields"] == found["onnxruntime"]["fields"]
    assert found["ort_cffi"]["custom"] == found["onnxruntime"]["custom"] == CUSTOM
    assert set(found["ort_cffi"]["provider_options"]) == set(found["onnxruntime"]["provider_options"])
