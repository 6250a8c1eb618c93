"""Live autoscaled services on ``gpuq serve``: the controller that rides on the control loop
(:mod:`~gpuq.run.serving.controller`), each replica's Pod and readiness probe
(:mod:`~gpuq.run.serving.replica_pod`), the request router in front of each service
(:mod:`~gpuq.run.serving.router`), the metrics an autoscaler reads from the router
(:mod:`~gpuq.run.serving.router_metrics`) and what a live autoscaler sync is given
(:mod:`~gpuq.run.serving.autoscale`; the count itself is decided in :mod:`gpuq.core.autoscaling.sync`)."""
