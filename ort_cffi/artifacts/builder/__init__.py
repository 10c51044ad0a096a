"""ort_cffi's own builder of training artifacts: the gradient graph and the files around it."""
