"""The control plane's durable state (design note 0003, "Store" and "Leader election").

``Store(url)`` on ``sqlite:///path.db`` (default :func:`default_url`) or
``postgresql+psycopg://...``; ``Store.migrate()`` applies the Alembic migrations shipped
in ``migrations/``; :class:`LeaderElector` picks the one replica that runs the loop, and its fence
(``store.fence``) keeps a replica that lost the lease from writing (:class:`LeaseLost`).
"""

from gpuq.run.store.batch import StepWrites
from gpuq.run.store.engine import default_url
from gpuq.run.store.leader import LeaderElector
from gpuq.run.store.notify import Wakeup
from gpuq.run.store.records import (
    LIVE_POD_STATES,
    POD_STATES,
    WORKLOAD_STATES,
    ConditionRecord,
    EventRecord,
    Feed,
    Fence,
    LeaseLost,
    NewWorkload,
    ObjectRecord,
    PodRecord,
    StoreConflict,
    StoreError,
    StoreNotFound,
    Tombstone,
    UserRecord,
    WorkloadChange,
    WorkloadRecord,
)
from gpuq.run.store.store import Store, token_hash

__all__ = [
    "LIVE_POD_STATES",
    "POD_STATES",
    "WORKLOAD_STATES",
    "ConditionRecord",
    "EventRecord",
    "Feed",
    "Fence",
    "LeaderElector",
    "LeaseLost",
    "NewWorkload",
    "ObjectRecord",
    "PodRecord",
    "StepWrites",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreNotFound",
    "Tombstone",
    "UserRecord",
    "Wakeup",
    "WorkloadChange",
    "WorkloadRecord",
    "default_url",
    "token_hash",
]
