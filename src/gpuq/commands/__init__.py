"""Command implementations too large for :mod:`gpuq.cli`: one module per verb or noun."""
