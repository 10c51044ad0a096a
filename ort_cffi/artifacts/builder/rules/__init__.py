"""The gradient rules, one file per family of operators; importing this package registers them all.

Each rule follows ONNX Runtime 1.19.2's own gradient builder where the runtime has the kernel that builder
emits (``com.microsoft`` gradient ops: losses and parameters then match its artifacts bit for bit), and
emits standard ONNX operators everywhere else. A new family is a new module here: it is found and
imported by name, and its rules register themselves.
"""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")
