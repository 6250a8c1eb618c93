"""The live control plane's API (``gpuq serve``): REST routes, access control, the loop runner.

:func:`gpuq.server.app.create_app` builds the FastAPI app; :mod:`gpuq.server.auth` holds
the roles; :mod:`gpuq.server.runner` runs leader election and the control loop beside
it; :mod:`gpuq.server.client` is what the CLI talks through. Nothing is imported here,
so the CLI's client verbs load without FastAPI. docs/serve.md describes it all.
"""
