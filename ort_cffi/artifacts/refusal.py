"""The artifacts child's one error: a problem with the request, which the parent reports by its kind.

``_child.py`` and the modules it loads by file location that judge the request (``parameter_selection``,
``ir_opset``) raise it; ``_child.main`` writes it to the result file, and ``runner.run_here`` (ort_cffi's
builder, in-process) turns it into ``ArtifactsInputError``. It lives apart from ``_child.py`` because those
modules cannot import the child (graph_facts.py says how the child's modules find each other).

Python 3.8 syntax and the standard library only, as the other modules the child loads.
"""


class Refusal(Exception):
    """A problem with the request, reported to the parent as ``kind`` and a message that names it."""

    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind
