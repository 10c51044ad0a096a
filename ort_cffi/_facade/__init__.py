"""The facade (private modules; ``ort_cffi`` is its public face): Java's classes with numpy in and out.
``tensors`` builds on the native layer only; ``sessions`` builds on ``tensors``; ``files`` and ``runtimes``
are what the applications need of the layers below, so that they never import those themselves."""
