"""Who may do what: bearer tokens resolved by the store, two roles, one ``authorize`` gate.

Roles (design note 0003, ``users.roles``):

* ``admin``: every verb on every kind, cluster-scoped objects included.
* ``member``: in its granted ``namespaces`` only, every verb on workloads, and read access to
  LocalQueues, their pending workloads, events and serving objects (Deployments, autoscalers,
  InferenceServices...: applying or deleting those is an admin's verb, docs/serve.md "Live
  services"; a member calls its namespaces' services through the router); anywhere, read access
  to cluster-scoped objects (ClusterQueues, ResourceFlavors, Cohorts...) and nodes; never a write
  to a configuration object.

Every refusal is raised before a handler writes, so a refused request changes nothing.
Tokens are random (``secrets.token_urlsafe``); the store keeps only their sha256, and every request
looks its token up again, so a deleted user's token or a rotated-out one stops working at once.
Users are an admin's to manage (:data:`USER`: delete, rotate a token).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Literal

from fastapi import Request
from sqlalchemy import select

from gpuq.run.store import Store, StoreConflict, UserRecord
from gpuq.run.store.convert import user_record
from gpuq.run.store.models import UserRow
from gpuq.server.errors import ApiError
from gpuq.server.kinds import CLUSTER_KINDS, SERVING_KINDS, WORKLOAD

ADMIN, MEMBER = "admin", "member"
Verb = Literal["get", "list", "watch", "apply", "delete", "logs", "rotate the token of"]
READ_VERBS = frozenset({"get", "list", "watch"})
NODE, EVENT, USER = "Node", "Event", "User"
"""Kinds authorization knows besides the stored ones: the live nodes, the event log and the users."""


def bearer_user(request: Request) -> UserRecord:
    """The user of ``Authorization: Bearer <token>``; 401 when the header is absent or the token unknown."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing bearer token: send 'Authorization: Bearer <token>'")
    store: Store = request.app.state.store
    user = store.user_for_token(token.strip())
    if user is None:
        raise ApiError(401, "invalid token: no user has it")
    return user


def is_admin(user: UserRecord) -> bool:
    return ADMIN in user.roles


def readable_namespaces(user: UserRecord) -> frozenset[str] | None:
    """The namespaces whose workloads, LocalQueues and events ``user`` may see; None means all."""
    return None if is_admin(user) else frozenset(user.namespaces)


def allowed(user: UserRecord, verb: Verb, kind: str, namespace: str = "") -> bool:
    """The role table of the module docstring as one predicate."""
    if is_admin(user):
        return True
    if MEMBER not in user.roles:
        return False
    if kind in CLUSTER_KINDS or kind == NODE:
        return verb in READ_VERBS
    if namespace not in user.namespaces:
        return False
    return kind == WORKLOAD or verb in READ_VERBS | {"logs"}


def authorize(user: UserRecord, verb: Verb, kind: str, namespace: str = "", *, shown: str = "") -> None:
    """Raise 403, naming the user, verb, kind (``shown``: Job rather than Workload) and namespace,
    unless :func:`allowed`."""
    if allowed(user, verb, kind, namespace):
        return
    where = f'in namespace "{namespace}"' if namespace else "(cluster-scoped)"
    if is_admin(user) or MEMBER in user.roles:
        grants = f"member of {', '.join(user.namespaces) or 'no namespace'}"
    else:
        grants = "no role"
    if namespace and namespace not in user.namespaces:
        why = "the namespace is not granted"
    elif kind == USER:
        why = "users are an admin's to manage"
    elif kind in SERVING_KINDS:
        why = "serving objects are an admin's to apply and delete (members read them and call their services)"
    else:
        why = "members only read cluster-scoped objects and LocalQueues"
    raise ApiError(403, f'user "{user.name}" ({grants}) may not {verb} {shown or kind} {where}: {why}')


# -- users -----------------------------------------------------------------------------------------------


def new_token() -> str:
    return secrets.token_urlsafe(32)


def list_users(store: Store) -> list[UserRecord]:
    """Every user, by name (the store has no method for it; a read of the ``users`` table)."""
    with store.transaction() as session:
        return [user_record(row) for row in session.scalars(select(UserRow).order_by(UserRow.name))]


def add_user(
    store: Store, name: str, *, namespaces: Sequence[str] = (), admin: bool = False, token: str | None = None
) -> str:
    """Create a user and return its token (shown once: only its hash is kept).

    A member needs at least one namespace. Raises ValueError for bad input and
    :class:`StoreConflict` for a taken name.
    """
    if not name.strip():
        raise ValueError("a user needs a name")
    spaces = sorted({n.strip() for n in namespaces if n.strip()})
    if not admin and not spaces:
        raise ValueError("a member needs at least one namespace (--namespaces a,b) or --admin")
    token = token or new_token()
    store.add_user(name, token, [ADMIN] if admin else [MEMBER], spaces)
    return token


def delete_user(store: Store, name: str) -> bool:
    """Delete a user (its token stops working at once); False when there is none.

    Raises ValueError for the last admin (no one could manage the control plane afterwards; a restart
    of ``gpuq serve`` would mint a new admin token)."""
    try:
        return store.delete_user(name, keep_role=ADMIN)
    except StoreConflict as error:
        raise ValueError(f"{error}: add another admin first (gpuq users add NAME --admin)") from error


def rotate_token(store: Store, name: str) -> str | None:
    """Give ``name`` a new token and return it (shown once); the old one stops working at once.
    None when there is no such user."""
    token = new_token()
    return token if store.set_token(name, token) else None


def ensure_admin(store: Store, token: str | None = None) -> str | None:
    """Make sure an admin exists; return a token to hand out when one was created now.

    With ``token``: that token works as an admin afterwards (a user ``admin``, or
    ``admin-2``... when the name is taken, is created unless it already does).
    Without: an ``admin`` user with a fresh token is created only when no admin exists.
    """
    if token is not None:
        user = store.user_for_token(token)
        if user is not None:
            if not is_admin(user):
                raise ValueError(f"--admin-token belongs to user {user.name!r}, who is not an admin")
            return None
    elif any(is_admin(user) for user in list_users(store)):
        return None
    taken = {user.name for user in list_users(store)}
    name = next(n for n in ("admin", *(f"admin-{i}" for i in range(2, 1000))) if n not in taken)
    try:
        return add_user(store, name, admin=True, token=token)
    except StoreConflict:  # another replica bootstrapped at the same moment
        return None if token is None else ensure_admin(store, token)
