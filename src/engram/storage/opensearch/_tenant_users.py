"""Each tenant's internal user on the cluster: made on the tenant's first request, impersonated by the
service account (never logged in as), made again when another process deleted it, deleted with the
tenant's data; the DLS role they all map to; and which tenants this process has listed in the store."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

from engram.errors import StorageError
from engram.storage.opensearch._client import as_user, errors
from engram.storage.opensearch._layout import Names, role_mapping, same_role, tenant_role, tenant_user

SECURITY = "/_plugins/_security/api"


class TenantUsers:
    """The tenants' internal users, created through ``admin`` (the security plugin's REST API as the
    service account), cached per process."""

    def __init__(self, admin: Callable[..., Any]) -> None:
        self._admin = admin
        self._users: set[str] = set()
        self.noted: set[str] = set()  # tenants this process listed in the store (``note_tenant``)
        self.guard = threading.Lock()

    def ensure_role(self, names: Names, label: str) -> None:
        """Refuse a cluster without the security plugin (nothing would isolate tenants), and make the
        tenants' DLS role and its mapping what this Engram sets (put again where missing or different:
        a role without its mapping, after a crash between the two or an admin's cleanup, would answer
        every tenant's request with 403)."""
        from opensearchpy import exceptions

        role = tenant_role(names)
        try:
            found = self._admin("GET", f"{SECURITY}/roles/{names.role}", params={"ignore": 404})
        except StorageError as exc:
            found = exc
        there = isinstance(found, dict) and names.role in found
        if not there and not (isinstance(found, dict) and found.get("status") == "NOT_FOUND"):
            raise StorageError(
                f"{label}: cannot read the security plugin's roles ({found}); Engram needs the "
                "security plugin (tenant isolation) and a service account that may manage its role, its "
                "tenants' users and impersonate them"
            ) from (found if isinstance(found, StorageError) else None)
        if not there or not same_role(found[names.role], role):
            self._admin("PUT", f"{SECURITY}/roles/{names.role}", role)
        mapping = role_mapping()
        try:
            found = self._admin("GET", f"{SECURITY}/rolesmapping/{names.role}")
        except StorageError as exc:
            if not isinstance(exc.__cause__, exceptions.NotFoundError):
                raise
            found = {}
        mapped = found.get(names.role) if isinstance(found, dict) else None
        if not isinstance(mapped, dict) or sorted(mapped.get("users", [])) != sorted(mapping["users"]):
            self._admin("PUT", f"{SECURITY}/rolesmapping/{names.role}", mapping)

    def user(self, owner: str) -> str:
        """The tenant's internal user, created on its first request."""
        user = tenant_user(owner)
        if user in self._users:
            return user
        with self.guard:
            if not self._exists(user):
                body = {"password": secrets.token_urlsafe(32) + "-A1", "attributes": {"owner": owner}}
                self._admin("PUT", f"{SECURITY}/internalusers/{user}", body)
            self._users.add(user)
        return user

    def send_as(self, owner: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        """``call(**kwargs)`` (a search) as the tenant's user, sent once more as a new user if another
        process deleted that one meanwhile (as ``UnitOfWork._send`` does)."""
        try:
            with errors():
                return call(**kwargs, headers=as_user(self.user(owner)))
        except StorageError as exc:
            if f"No such user:{tenant_user(owner)}" not in str(exc):
                raise
        user = self.remake(owner)
        with errors():
            return call(**kwargs, headers=as_user(user))

    def remake(self, owner: str) -> str:
        """The tenant's user made again: another process of the service deleted it (``delete``), and
        its listing, while this one had both cached."""
        self.forget(owner)
        return self.user(owner)

    def delete(self, owner: str) -> bool:
        """Delete the tenant's internal user; whether there was one."""
        user = tenant_user(owner)
        found = self._admin("DELETE", f"{SECURITY}/internalusers/{user}", params={"ignore": 404})
        self.forget(owner)
        return isinstance(found, dict) and found.get("status") == "OK"

    def forget(self, owner: str) -> None:
        """Drop what this process cached of the tenant (its user, its listing)."""
        with self.guard:
            self._users.discard(tenant_user(owner))
            self.noted.discard(owner)

    def _exists(self, user: str) -> bool:
        found = self._admin("GET", f"{SECURITY}/internalusers/{user}", params={"ignore": 404})
        return isinstance(found, dict) and user in found
