"""One module per call item type, each defining its :class:`~executor.kinds.ToolKind`.

The registry (:mod:`executor.registry`) lists them; the dispatcher asks them. A module here
holds the handler as a plain function over the SDK's model of the call (testable on its own)
and the kind that wires it to a run's toolbox.
"""
