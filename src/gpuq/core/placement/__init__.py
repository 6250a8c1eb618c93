"""Placement: which node, and which GPUs on it, a pod gets."""
