"""Capacity and provisioning decisions (pure: no I/O, clock, randomness or threads).

* :mod:`.options` - what can be provisioned: machine options, stock, capacity types;
* :mod:`.compute_class` - GKE Custom Compute Class rules: which option a pending pod group gets,
  and when to migrate back to a preferred rule (:mod:`.presets` expands gpuq's strategy presets);
* :mod:`.autoscaler` - node pool scale-up and idle scale-down; :mod:`.disruption` - Karpenter-style
  consolidation with disruption budgets and PodDisruptionBudgets;
* :mod:`.queued` - Kueue ProvisioningRequest lifecycle (queued, DWS flex-start and calendar modes);
* :mod:`.prices` - a price catalogue with the source of every figure.

Shells (the simulator, the live loop) carry the decisions out; see docs/provisioning.md.
"""
