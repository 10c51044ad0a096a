"""The engine's standard forms of ONNX Runtime's training operators, for the artifact builder: each
``com.microsoft`` training operator written in standard ONNX operators by the one rule the engine lowers it
with when it makes a session. The builder writes some of them into the training model itself, where the form
is measured faster than the training build's kernel (``ort_cffi/data/standard_forms.json``). Handed up on
purpose from the backend layer (``ort_cffi._backends.engine.lowering``), so that no application imports below
the facade and each form has one implementation."""
from ort_cffi._backends.engine.lowering import lower_chosen_ops, lowered_op_types
from ort_cffi._backends.engine.lowering.shape_targets import without_weights

__all__ = ["lower_chosen_ops", "lowered_op_types", "without_weights"]
