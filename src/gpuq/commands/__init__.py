"""Command implementations behind :mod:`gpuq.cli`: one module per verb or noun, and
:mod:`~gpuq.commands.render` for what the snapshot verbs print."""
