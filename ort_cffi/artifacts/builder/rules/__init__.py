"""The gradient rules, one file per family of operators; importing this package registers them all.

Each rule follows ONNX Runtime 1.19.2's own gradient builder where the runtime has the kernel that builder
emits (``com.microsoft`` gradient ops: losses and parameters then match its artifacts bit for bit), and
emits standard ONNX operators everywhere else.
"""
from ort_cffi.artifacts.builder.rules import (  # noqa: F401  (each module registers its rules on import)
    elementwise,
    losses,
    matrix,
    reduction,
)
