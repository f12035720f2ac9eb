"""The admin key in effect is exactly the configured ENGRAM_ADMIN_KEY, and a weak one is refused
(issue 12 #21); sign-in sessions end for good (issue 26 #1-3)."""

import base64
import hashlib
import hmac
import os
import subprocess
import sys
import time

import httpx
import pytest

from engram.auth import SESSION_PREFIX, ApiKeys, hash_key
from engram.errors import Conflict, InvalidInput
from engram.interfaces.rest.background import free_port
from engram.storage.sqlite import SQLiteStore

KEY_A = "0f3a9c27d84be615a2c7e90d3b41f58c"  # 32 hex digits, as `openssl rand -hex 16` prints
KEY_B = "Zq4-xW8_tR2mNp7LkS9vHb3JcY6dFg1Ae5UoIi0Pz"


@pytest.fixture
def keys(tmp_path):
    store = SQLiteStore(tmp_path / "keys.db")
    yield ApiKeys(store)
    store.close()


def test_a_new_admin_key_revokes_the_old_ones(keys):
    generated, _ = keys.create(None, label="created on first start")
    assert keys.adopt_admin_key(KEY_A) == 1
    assert keys.resolve(generated) is None and keys.resolve(KEY_A).is_admin
    assert keys.adopt_admin_key(KEY_A) == 0  # the same setting again changes nothing
    assert keys.adopt_admin_key(KEY_B) == 1
    assert keys.resolve(KEY_A) is None and keys.resolve(KEY_B).is_admin
    with pytest.raises(InvalidInput, match="revoked"):  # a revoked key never comes back
        keys.adopt_admin_key(KEY_A)
    assert keys.resolve(KEY_B).is_admin


def test_the_admin_key_cannot_be_revoked_only_replaced(keys):
    """`DELETE /v1/keys/<admin key>` (or `engram keys revoke`) answered 204: every admin route was then
    401, and `engram serve` with that ENGRAM_ADMIN_KEY refused to start (an outside review)."""
    keys.adopt_admin_key(KEY_A)
    admin = keys.resolve(KEY_A)
    with pytest.raises(Conflict, match="is the only admin key: revoking it would lock every admin out"):
        keys.revoke(admin.key_id)
    assert keys.resolve(KEY_A).is_admin
    second, record = keys.create(None, label="brought by an import")  # two live ones: either may go
    keys.revoke(record.id)
    assert keys.resolve(second) is None and keys.resolve(KEY_A).is_admin
    keys.adopt_admin_key(KEY_B)  # replaced: the old one is revoked, and revoking it again says so
    with pytest.raises(Conflict, match="already revoked"):
        keys.revoke(admin.key_id)


def test_a_key_label_is_one_line(keys):
    """A newline in a label forged a row of `engram keys list`; NUL is stored by no backend alike."""
    for label in ("x\nfake", "a\x00b", "tab\there", "x" * 201, "nel\x85x", "sep\u2028x", "csi\x9b31m"):
        with pytest.raises(InvalidInput, match="one line"):
            keys.create("dave", label)
    assert keys.list() == []
    assert keys.create("dave", "laptop — Jo's")[1].label == "laptop — Jo's"


def test_user_keys_survive_an_admin_key_change(keys):
    user_key, _ = keys.create("sarah")
    keys.adopt_admin_key(KEY_A)
    keys.adopt_admin_key(KEY_B)
    assert keys.resolve(user_key).user_id == "sarah"
    with pytest.raises(InvalidInput, match="user key"):
        keys.adopt_admin_key(user_key)


@pytest.mark.parametrize(
    ("weak", "why"),
    [
        ("x" * 24, "at least 32 characters"),
        ("correct-horse-battery-stap", "at least 32 characters"),
        ("a" * 64, "at least 8 different"),
        ("abcabcabcabcabcabcabcabcabcabcabcabc", "at least 8 different"),
        ("0f3a9c27d84be615 a2c7e90d3b41f58c", "without spaces"),
        ("0f3a9c27d84be615a2c7e90d3b41f58cé", "printable ASCII"),
    ],
)
def test_weak_admin_keys_are_refused(keys, weak, why):
    with pytest.raises(InvalidInput, match=why):
        keys.adopt_admin_key(weak)
    assert keys.list() == []


def _serve(tmp_path, admin_key):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_ADMIN_KEY=admin_key or "")
    if admin_key is None:
        del env["ENGRAM_ADMIN_KEY"]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.communicate()[0])


def _stop(proc):
    proc.terminate()
    return proc.communicate(timeout=20)[0]


def test_serve_uses_exactly_the_configured_admin_key(tmp_path):
    def status(url, key):
        return httpx.get(f"{url}/v1/keys", headers={"Authorization": f"Bearer {key}"}).status_code

    proc, url = _serve(tmp_path, KEY_A)
    try:
        assert status(url, KEY_A) == 200
    finally:
        _stop(proc)
    proc, url = _serve(tmp_path, KEY_B)
    try:
        assert status(url, KEY_B) == 200 and status(url, KEY_A) == 401
    finally:
        out = _stop(proc)
    assert "older admin keys revoked: 1" in out


def test_a_generated_admin_key_is_shown_once_and_a_restart_says_how_to_replace_it(tmp_path):
    proc, _ = _serve(tmp_path, None)
    first = _stop(proc)
    proc, _ = _serve(tmp_path, None)
    again = _stop(proc)
    assert "admin key (shown once, keep it): egk_" in first and "egk_" not in again
    assert "lost? set ENGRAM_ADMIN_KEY to replace it" in again


def test_serve_refuses_a_weak_admin_key(tmp_path):
    env = dict(os.environ, ENGRAM_HOME=str(tmp_path), ENGRAM_ADMIN_KEY="y" * 24)
    proc = subprocess.run(
        [sys.executable, "-m", "engram", "serve"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 1 and "ENGRAM_ADMIN_KEY must be at least 32 characters" in proc.stdout
    assert "Traceback" not in proc.stderr and not (tmp_path / "engram.db").exists()


def test_sessions_are_stored_end_at_sign_out_everywhere_and_with_their_key(store):
    """The inspector's sessions live in the store, by hash, on every backend: a token stops working at
    sign-out (a copied one too), "sign out everywhere" ends all of a key's, revoking the key ends them,
    and another process on the store (a worker, a restart) sees the same."""
    keys = ApiKeys(store)
    key, record = keys.create("sarah")
    sarah = keys.resolve(key)
    token = keys.open_session(sarah, 60)
    assert token.startswith(SESSION_PREFIX) and key not in token and record.id not in token
    assert keys.resolve_session(token) == sarah and ApiKeys(store).resolve_session(token) == sarah

    # Nothing is signed, so nothing can be minted: the key id (public) and any secret give nothing.
    body = f"{record.id}.9999999999"
    signature = base64.urlsafe_b64encode(hmac.new(b"a", body.encode(), hashlib.sha256).digest()).decode()
    for forged in (f"{body}.{signature.rstrip('=')}", record.id, f"{SESSION_PREFIX}{record.id}"):
        assert keys.resolve_session(forged) is None
    # Whatever a cookie holds, nobody (never an exception): not ASCII, a lone surrogate, too long.
    for junk in (f"{body}.é", f"{SESSION_PREFIX}é", "\ud800", SESSION_PREFIX + "a" * 600, "", None):
        assert keys.resolve_session(junk) is None and keys.end_session(junk) is False
    assert keys.resolve_session(keys.open_session(sarah, -1)) is None  # expired

    other = keys.open_session(sarah, 60)  # another browser
    assert keys.end_session(token) and not keys.end_session(token)  # sign out
    assert keys.resolve_session(token) is None and keys.resolve_session(other) == sarah

    bob_key, _ = keys.create("bob")
    bob = keys.resolve(bob_key)
    bobs = keys.open_session(bob, 60)
    third = keys.open_session(sarah, 60)
    assert keys.end_sessions(record.id) == 2  # sign out everywhere: sarah's key's sessions only
    assert keys.resolve_session(other) is None and keys.resolve_session(third) is None
    assert keys.resolve_session(bobs) == bob

    fourth = keys.open_session(sarah, 60)
    keys.revoke(record.id)
    assert keys.resolve_session(fourth) is None and store.find_session(hash_key(fourth)) is None

    stale = keys.open_session(bob, -1)
    keys.open_session(bob, 60)  # opening a session drops the expired ones
    assert store.find_session(hash_key(stale)) is None and store.find_session(hash_key(bobs)) is not None
