"""ort_cffi's own generator of training artifacts: a gradient builder in pure Python over the ``onnx``
protobuf, and the writers of the files a training session reads. It imports no ``onnxruntime`` Python
package and runs in ort_cffi's own process, on every interpreter.

- ``engine``: the reverse pass, knowing no operator (path, reverse walk, accumulation);
- ``context``: what rules emit with (nodes, constants, shapes, broadcasting undone);
- ``registry`` and ``rules/``: one gradient rule per operator, in files by family;
- ``loss_blocks``: the losses added on top of a model, as ONNX Runtime's ``onnxblock`` adds them;
- ``training_model``: the training and eval models as ONNX Runtime 1.19.2's training session takes them;
- ``checkpoint`` (with ``flatbuffer``) and ``optimizer``: the checkpoint and the optimizer models, as ONNX
  Runtime's generator writes them.
"""
