"""Autoscaled inference services in the simulator (``spec.serving``): the fleet that rides on a
:class:`~gpuq.sim.simulator.Simulation` (:mod:`~gpuq.sim.serving.fleet`), the replica queueing
model (:mod:`~gpuq.sim.serving.replica_model`), the metrics the autoscalers read from it
(:mod:`~gpuq.sim.serving.modelled_metrics`), request rates (:mod:`~gpuq.sim.serving.traffic`),
the plan read from a Scenario (:mod:`~gpuq.sim.serving.plan`) and the metrics and report section
(:mod:`~gpuq.sim.serving.report`)."""
