"""Users through the API: an admin deletes a user or rotates its token (``gpuq users`` does the same
against the store directly). Either takes effect at the next request: tokens are looked up every time.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from gpuq.run.store import Store, UserRecord
from gpuq.server.auth import USER, authorize, bearer_user, delete_user, rotate_token
from gpuq.server.errors import ApiError, not_found

router = APIRouter(tags=["users"])
User = Annotated[UserRecord, Depends(bearer_user)]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


@router.delete("/users/{name}", summary="Delete a user (admins only): its token gets 401 from now on.")
def delete(request: Request, name: str, user: User) -> dict[str, Any]:
    authorize(user, "delete", USER, shown=f"User {name}")
    try:
        deleted = delete_user(_store(request), name)
    except ValueError as error:
        raise ApiError(409, str(error)) from error
    if not deleted:
        raise not_found(f"user {name}")
    return {"kind": USER, "name": name, "action": "deleted"}


@router.post(
    "/users/{name}/token",
    summary="Rotate a user's token (admins only): the new one, shown once; the old one gets 401 from now on.",
)
def rotate(request: Request, name: str, user: User) -> dict[str, Any]:
    authorize(user, "rotate the token of", USER, shown=f"User {name}")
    token = rotate_token(_store(request), name)
    if token is None:
        raise not_found(f"user {name}")
    return {"kind": USER, "name": name, "action": "rotated", "token": token}
