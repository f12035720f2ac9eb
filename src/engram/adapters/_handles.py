"""What the adapters share: one user's memory, embedded (``UserMemory``) or over REST (``Client``), which
have the same verbs and signatures (tests/test_client_parity.py), and the rows a user has of one type."""

from __future__ import annotations

from engram.client import Client
from engram.errors import PermissionDenied
from engram.limits import MAX_PAGE
from engram.memory import Engram, UserMemory
from engram.models import Memory, MemoryType, ProceduralMemory

UserHandle = UserMemory | Client


def user_handle(memory: Engram | UserHandle, user_id: str) -> UserHandle:
    """``user_id``'s memory: a handle of the embedded store, or the client when it is the key's user
    (a client opens only the memory of its key's user; PermissionDenied for any other)."""
    if isinstance(memory, Engram):
        return memory.for_user(user_id)
    if memory.user_id != user_id:
        raise PermissionDenied(
            f"this adapter holds the memory of user {memory.user_id!r}, not of {user_id!r}"
        )
    return memory


def known_users(memory: Engram | UserHandle) -> list[str]:
    """The users whose memory is reachable: every user of an embedded store, else the handle's one."""
    if isinstance(memory, Engram):
        return sorted(memory.store.tenants())
    return [memory.user_id]


def all_rows(handle: UserHandle, memory_type: MemoryType) -> list[Memory]:
    """Every live row of one type, newest first, read page by page (the service's largest page)."""
    rows: list[Memory] = []
    while True:
        page = handle.list(memory_type, limit=MAX_PAGE, offset=len(rows))
        rows.extend(page)
        if len(page) < MAX_PAGE:
            return rows


def readable_text(memory: Memory) -> str:
    """What a model reads of a memory: its text, or for a playbook (whose text is often empty) its name,
    when it applies, its notes and its steps in order, the refined ones when a failure brought them (a
    newcomer's walk: the LangChain and LlamaIndex adapters handed a playbook over as "")."""
    if not isinstance(memory, ProceduralMemory):
        return memory.text
    when = f" (when {memory.trigger_text})" if memory.trigger_text else ""
    steps = sorted(memory.refined_steps or memory.steps, key=lambda step: step.order)
    lines = [memory.name + when, memory.text, memory.description]
    said = [line for line in dict.fromkeys(lines) if line]  # a text that repeats the name: once
    return "\n".join(said + [f"{s.order}. {s.instruction}" for s in steps])
