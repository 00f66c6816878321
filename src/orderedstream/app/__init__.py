"""The application layer: the ``orderedstream`` CLI, the main job and the chaos suite.

Built on the libraries (``python_datasource``, ``statestore``, ``sinks``) and, for the embedded
demo, on the local services of ``orderedstream.dev``.
"""
