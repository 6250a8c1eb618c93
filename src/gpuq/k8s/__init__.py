"""Kubernetes: export gpuq configuration as manifests, import live cluster dumps, diff configurations."""
