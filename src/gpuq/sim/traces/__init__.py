"""Workload traces: the generic CSV / JSONL format and importers of public GPU-cluster traces."""
