"""The simulator carrying out :mod:`gpuq.core.provisioning`'s decisions (``spec.provisioning``):
node autoscaling, compute classes, consolidation and spot in :mod:`~gpuq.sim.provisioning.provisioner`,
queued ProvisioningRequests (DWS flex-start and calendar) in
:mod:`~gpuq.sim.provisioning.queued_requests`, what they need from a variant in
:mod:`~gpuq.sim.provisioning.setup`, and their metrics and report sections in
:mod:`~gpuq.sim.provisioning.report` and :mod:`~gpuq.sim.provisioning.report_html`."""
