"""The cluster without Kueue: one queue with no quota, no priorities, no preemption.

This is what a shared cluster does by default: every job is let in as it
comes, and its pods take whatever nodes are free, first come first served
(a gang waits until all its pods fit, others that fit may pass it). Written
as a configuration so that the same simulator runs it.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuq.core.model import (
    ClusterConfig,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)

FCFS_QUEUE = "first-come-first-served"
ANY_FLAVOR = "any-node"
UNLIMITED = 1 << 60


def fcfs_config(config: ClusterConfig, resources: Iterable[str]) -> ClusterConfig:
    """``config``'s LocalQueues all pointing at one unlimited ClusterQueue over every node."""
    covered = tuple(sorted(set(resources)))
    flavor = FlavorQuotas(ANY_FLAVOR, {r: ResourceQuota(UNLIMITED) for r in covered})
    queue = ClusterQueue(
        FCFS_QUEUE,
        resource_groups=(ResourceGroup(covered, (flavor,)),) if covered else (),
        queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO,
        namespace_selector=LabelSelector(),
    )
    local_queues = {
        key: LocalQueue(lq.namespace, lq.name, FCFS_QUEUE) for key, lq in config.local_queues.items()
    }
    return ClusterConfig(
        flavors={ANY_FLAVOR: ResourceFlavor(ANY_FLAVOR)},
        cluster_queues={FCFS_QUEUE: queue},
        local_queues=local_queues,
        namespace_labels=config.namespace_labels,
    )
