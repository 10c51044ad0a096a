"""The lowering of ``com.microsoft`` training operators to standard ONNX operators, done once per session.

The rules are in ``registry.RULES`` (see ``registry`` for what a rule is), one file per family beside it.
"""
