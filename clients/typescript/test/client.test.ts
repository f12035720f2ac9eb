/**
 * The client against a live `engram serve` (started by tests/clients/test_typescript_client.py, which
 * passes its URL and keys): every verb, the errors, and isolation between users' keys.
 * Environment: ENGRAM_URL, ENGRAM_KEY_SARAH, ENGRAM_KEY_BOB (user keys), ENGRAM_ADMIN_KEY,
 * ENGRAM_CATALOG_ID (a catalog row the admin added).
 */

import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { after, describe, test } from "node:test";

import {
  Client,
  ClientClosed,
  Conflict,
  EngramError,
  ImportFileError,
  InvalidInput,
  NotFound,
  PermissionDenied,
  ServiceUnavailable,
  StorageError,
  Unauthorized,
  type Memory,
} from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run through tests/clients/test_typescript_client.py`);
  return value;
}

const url = env("ENGRAM_URL");
const sarah = new Client(url, env("ENGRAM_KEY_SARAH"));
const bob = new Client(url, env("ENGRAM_KEY_BOB"));
const catalogId = env("ENGRAM_CATALOG_ID");
after(() => {
  sarah.close();
  bob.close();
});

const ids = (rows: Array<Memory | { memory: Memory } | { id: string }>): string[] =>
  rows.map((r) => ("memory" in r ? r.memory.id : r.id));

async function rejects<E extends EngramError>(
  call: Promise<unknown>,
  kind: new (...args: never[]) => E,
  message?: RegExp,
): Promise<E> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof kind, `expected ${kind.name}, got ${String(error)}`);
    if (message) assert.match(error.message, message);
    return error;
  }
  assert.fail(`expected ${kind.name}, nothing was thrown`);
}

describe("the verbs", () => {
  test("userId names the key's user", async () => {
    assert.equal(await sarah.userId(), "sarah");
    assert.equal(await bob.userId(), "bob");
  });

  test("rememberTurn stores a turn verbatim, and get and list read it back", async () => {
    const said = new Date("2024-05-01T10:30:00Z");
    const first = await sarah.rememberTurn("  we moved to Edinburgh last week!  ", {
      at: said,
      session_id: "chat-7",
      metadata: { channel: "web" },
    });
    assert.equal(first.memory_type, "episodic");
    assert.deepEqual(
      [first.text, first.user_id, first.session_id],
      ["  we moved to Edinburgh last week!  ", "sarah", "chat-7"],
    );
    assert.equal(new Date(first.timestamp).getTime(), said.getTime());
    assert.deepEqual(first.metadata, { channel: "web" });
    const reply = await sarah.rememberTurn("yes, twice", { session_id: "chat-7" });
    assert.deepEqual([reply.context, reply.context_id], [first.text, first.id]);
    assert.deepEqual(await sarah.get(first.id), first);
    const listed = await sarah.list("episodic", { limit: 500 });
    assert.deepEqual(ids(listed).slice(0, 2), [reply.id, first.id]); // newest first
  });

  test("write stores facts and playbooks; a supersession shows in history", async () => {
    const bristol = await sarah.write("Sarah lives in Bristol", {
      fact_type: "identity",
      confidence: 0.9,
      valid_from: new Date("2020-01-01T00:00:00Z"),
      metadata: { source: "chat" },
    });
    assert.equal(bristol.memory_type, "semantic");
    assert.equal(bristol.confidence, 0.9);
    const edinburgh = await sarah.write("Sarah lives in Edinburgh", { supersedes_id: bristol.id });
    assert.ok(edinburgh.memory_type === "semantic" && edinburgh.supersedes === bristol.id);
    assert.deepEqual(ids(await sarah.history(bristol.id)), [bristol.id, edinburgh.id]);
    const old = await sarah.get(bristol.id);
    assert.ok(old.memory_type === "semantic" && old.superseded_by === edinburgh.id);
    const live = ids(await sarah.list("semantic"));
    assert.ok(live.includes(edinburgh.id) && !live.includes(bristol.id));
    assert.ok(ids(await sarah.list("semantic", { include_superseded: true })).includes(bristol.id));
    const playbook = await sarah.write("", {
      memory_type: "procedural",
      name: "Re-pair a Zigbee sensor",
      trigger_text: "a Zigbee sensor is offline",
      steps: [
        { order: 1, instruction: "hold reset 10 s" },
        { order: 2, instruction: "pair from the app", tool: "app" },
      ],
    });
    assert.ok(playbook.memory_type === "procedural");
    assert.deepEqual(
      (playbook.steps ?? []).map((s) => [s.order, s.instruction]),
      [
        [1, "hold reset 10 s"],
        [2, "pair from the app"],
      ],
    );
    assert.deepEqual(ids(await sarah.list("procedural")), [playbook.id]);
    await rejects(sarah.write("Sarah lives in Glasgow", { supersedes_id: bristol.id }), Conflict);
  });

  test("recall ranks and explains, filters by type, shows the catalog, and has a compact view", async () => {
    const turn = await sarah.rememberTurn("my hub shows error E-4021 since the update");
    const hits = await sarah.recall("error E-4021 on the hub", { k: 3, record_use: false });
    assert.equal(hits[0]?.memory.id, turn.id);
    assert.deepEqual(
      hits.map((h) => h.rank),
      hits.map((_, i) => i + 1),
    );
    assert.ok("final" in (hits[0]?.explain ?? {}) && hits.shed === false);
    assert.deepEqual(ids(await sarah.recall("error E-4021", { memory_types: ["episodic"], k: 1 })), [
      turn.id,
    ]);
    const compact = await sarah.recall("error E-4021 on the hub", {
      k: 3,
      record_use: false,
      view: "compact",
    });
    assert.deepEqual(ids(compact), ids(hits));
    assert.deepEqual(Object.keys(compact[0] ?? {}).sort(), [
      "confidence",
      "event_time",
      "id",
      "text",
      "type",
    ]);
    assert.deepEqual(
      ids(await sarah.recall("which radios does the hub have?", { memory_types: ["catalog"] })),
      [catalogId],
    );
    const noCatalog = await sarah.recall("which radios does the hub have?", { include_catalog: false });
    assert.ok(!ids(noCatalog).includes(catalogId));
    assert.deepEqual(await sarah.recall("error E-4021 on the hub", { min_confidence: 1 }), []);
    const past = await sarah.recall("error E-4021", { as_of: new Date(Date.now() + 86_400_000), k: 1 });
    assert.equal(past[0]?.memory.id, turn.id);
  });

  test("recall filters by session, event time and metadata inside the search", async () => {
    const t0 = new Date("2025-03-01T09:00:00Z");
    const day = (d: number) => new Date(t0.getTime() + d * 86_400_000);
    const web = [];
    for (const d of [0, 1, 2])
      web.push(
        await sarah.rememberTurn(`the bridge lost its mesh link, day ${d}`, { at: day(d), session_id: "fa" }),
      );
    const app = await sarah.rememberTurn("the bridge lost its mesh link again", {
      at: day(3),
      session_id: "fb",
      metadata: { ch: "app" },
    });
    const query = "the bridge lost its mesh link";
    const bySession = await sarah.recall(query, { session_id: "fa", record_use: false });
    assert.deepEqual(ids(bySession).sort(), ids(web).sort());
    assert.deepEqual(ids(await sarah.recall(query, { metadata: { ch: "app" }, record_use: false })), [
      app.id,
    ]);
    const span = await sarah.recall(query, { time_from: day(1), time_to: day(3), session_id: "fa" });
    assert.deepEqual(ids(span).sort(), [web[1]!.id, web[2]!.id].sort());
    await rejects(sarah.recall(query, { session_id: "" }), InvalidInput);
  });

  test("recordOutcome counts a playbook's successes and failures, for its owner only", async () => {
    const playbook = await sarah.write("", {
      memory_type: "procedural",
      name: "Re-pair a Zigbee sensor",
      steps: [{ order: 1, instruction: "hold reset 10 s" }],
    });
    await sarah.recordOutcome(playbook.id, true);
    const after = await sarah.recordOutcome(playbook.id, false);
    assert.ok(after.memory_type === "procedural");
    assert.deepEqual([after.success_count, after.failure_count], [1, 1]);
    await rejects(bob.recordOutcome(playbook.id, true), NotFound);
    const fact = await sarah.write("Sarah's sensors are Zigbee");
    await rejects(sarah.recordOutcome(fact.id, true), InvalidInput);
  });

  test("forget leaves a tombstone; a retracted fact stays retracted unless revived", async () => {
    const turn = await sarah.rememberTurn("a turn to forget");
    const tombstone = await sarah.forget(turn.id);
    assert.deepEqual(
      [tombstone.id, tombstone.user_id, tombstone.memory_type],
      [turn.id, "sarah", "episodic"],
    );
    assert.ok(!("text" in tombstone));
    await rejects(sarah.get(turn.id), NotFound);
    for (const revive of [false, true]) {
      const old = await sarah.write(`Sarah is allergic to penicillin (${revive})`, {
        fact_type: "constraint",
      });
      const fix = await sarah.write(`Sarah was never allergic to anything (${revive})`, {
        supersedes_id: old.id,
        contradiction: "harsh",
      });
      await sarah.forget(fix.id, { revive_retracted: revive });
      const now = await sarah.get(old.id);
      assert.ok(now.memory_type === "semantic");
      assert.equal(now.retracted, !revive);
    }
  });

  test("list pages newest first, over the service's page of 500 too", async () => {
    const written: string[] = [];
    for (let i = 0; i < 5; i++) written.push((await bob.write(`Bob's fact number ${i}`)).id);
    const newestFirst = written.reverse();
    const pages = [];
    for (const offset of [0, 2, 4, 6]) pages.push(ids(await bob.list("semantic", { limit: 2, offset })));
    assert.deepEqual(pages, [newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4), []]);
    assert.deepEqual(ids(await bob.list("semantic", { limit: 1_000 })), newestFirst);
    await rejects(bob.list("semantic", { limit: 10 ** 10 }), InvalidInput, /limit/);
    await rejects(bob.list("semantic", { limit: 0 }), InvalidInput);
    for (const id of written) await bob.forget(id);
  });

  test("importJson writes a valid document, and nothing of an invalid one", async () => {
    const report = await sarah.importJson({
      episodic: [{ text: "we adopted a cat", days_ago: 3, key: "cat-turn" }],
      semantic: [{ text: "Sarah has a cat called Miso", supporting_episodes: ["cat-turn"], key: "cat" }],
    });
    assert.deepEqual([report["episodic"], report["semantic"], report["procedural"]], [1, 1, 0]);
    const written = report["ids"] as Record<string, string>;
    const fact = await sarah.get(written["cat"] ?? "");
    assert.ok(fact.memory_type === "semantic" && fact.supporting_episode_ids?.[0] === written["cat-turn"]);
    const before = (await sarah.list("episodic", { limit: 500 })).length;
    const error = await rejects(
      sarah.importJson({ episodic: [{ text: "ok" }, { text: "" }] }),
      ImportFileError,
    );
    assert.match(error.message, /episodic\[1\]\.text/);
    await rejects(sarah.importJson({ user_id: "bob", episodic: [{ text: "not mine" }] }), ImportFileError);
    assert.equal((await sarah.list("episodic", { limit: 500 })).length, before);
  });
});

describe("the errors", () => {
  test("invalid input is InvalidInput, with the service's message, and changes nothing", async () => {
    const before = (await sarah.list("episodic", { limit: 500 })).length;
    const empty = await rejects(sarah.rememberTurn(""), InvalidInput);
    assert.equal(empty.code, "invalid_input");
    assert.equal(empty.status, 422);
    await rejects(
      sarah.rememberTurn("hi", { at: "2024-05-01" as unknown as Date }),
      InvalidInput,
      /at must be/,
    );
    await rejects(sarah.rememberTurn("hi", { at: new Date("not a date") }), InvalidInput);
    await rejects(sarah.write("f", { confidence: 2 }), InvalidInput);
    await rejects(sarah.write("f", { confidence: Number.NaN }), InvalidInput, /JSON/);
    await rejects(sarah.write("f", { memory_type: "episodic" as "semantic" }), InvalidInput);
    await rejects(sarah.write("", { memory_type: "procedural" }), InvalidInput); // a playbook needs a name
    await rejects(sarah.recall("q", { k: 500 }), InvalidInput);
    await rejects(sarah.recall("q", { min_confidence: 1.5 }), InvalidInput);
    assert.equal((await sarah.list("episodic", { limit: 500 })).length, before);
  });

  test("a missing id is NotFound, naming it; a catalog row cannot be forgotten by a user", async () => {
    const missing = "sem_" + "A".repeat(22);
    for (const call of [
      () => sarah.get(missing),
      () => sarah.history(missing),
      () => sarah.forget(missing),
    ]) {
      const error = await rejects(call(), NotFound);
      assert.equal(error.memoryId, missing);
      assert.equal(error.code, "not_found");
    }
    const odd = await rejects(sarah.get("../me"), NotFound); // stays one path segment
    assert.equal(odd.memoryId, "../me");
    assert.equal((await sarah.get(catalogId)).memory_type, "catalog");
    await rejects(sarah.forget(catalogId), PermissionDenied);
  });

  test("a refused key is Unauthorized; an admin key on a user's memory is PermissionDenied", async () => {
    for (const key of ["", "egk_not-a-key", env("ENGRAM_KEY_SARAH") + "x"]) {
      const stranger = new Client(url, key);
      const error = await rejects(stranger.rememberTurn("hello"), Unauthorized);
      assert.ok(error instanceof PermissionDenied && error.code === "unauthorized" && error.status === 401);
    }
    const admin = new Client(url, env("ENGRAM_ADMIN_KEY"));
    const denied = await rejects(admin.recall("anything"), PermissionDenied);
    assert.ok(!(denied instanceof Unauthorized));
    assert.throws(() => new Client(url, "egk_\n"), InvalidInput);
  });

  test("no service, or not an Engram one, is ServiceUnavailable; a closed client sends nothing", async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const address = probe.address();
        probe.close(() => resolve(typeof address === "object" && address ? address.port : 0));
      });
    });
    const nobody = new Client(`http://127.0.0.1:${port}`, env("ENGRAM_KEY_SARAH"));
    const gone = await rejects(nobody.recall("anything"), ServiceUnavailable);
    assert.ok(gone instanceof StorageError && gone.code === "service_unavailable");
    const astray = new Client(url + "/not-here", env("ENGRAM_KEY_SARAH"));
    await rejects(astray.list("semantic"), ServiceUnavailable, /baseUrl/);
    // no protocol: a TypeError from URL before (a newcomer's walk), an Engram error now
    const bare = new Client(`127.0.0.1:${port}`, env("ENGRAM_KEY_SARAH"));
    await rejects(bare.recall("anything"), ServiceUnavailable, /http:\/\//);
    const proxy = createHttpServer((request, response) => {
      const gateway = request.url === "/v1/me"; // a proxy's error page, else JSON that is not Engram's
      response.writeHead(gateway ? 502 : 200, { "Content-Type": gateway ? "text/html" : "application/json" });
      response.end(gateway ? "<html>Bad gateway</html>" : '{"data": "nope"}');
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const address = proxy.address();
    const notEngram = new Client(
      `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`,
      "egk_x",
    );
    try {
      await rejects(notEngram.userId(), ServiceUnavailable, /HTTP 502 to GET \/v1\/me/);
      await rejects(notEngram.recall("anything"), ServiceUnavailable, /HTTP 200 to POST \/v1\/recall/);
    } finally {
      proxy.closeAllConnections();
      await new Promise((resolve) => proxy.close(resolve));
    }
    const closed = new Client(url, env("ENGRAM_KEY_SARAH"));
    assert.equal((await closed.rememberTurn("one before closing")).text, "one before closing");
    closed.close();
    await rejects(closed.rememberTurn("two"), ClientClosed, /is closed/);
    const texts = (await sarah.list("episodic", { limit: 500 })).map((m) => m.text);
    assert.ok(texts.includes("one before closing") && !texts.includes("two"));
  });
});

describe("isolation", () => {
  test("one key cannot read, change or recall another user's memories", async () => {
    const secret = await sarah.write("Sarah's bank PIN hint is the cat's birthday");
    const turn = await sarah.rememberTurn("my private diary entry about the PIN");
    for (const id of [secret.id, turn.id]) {
      await rejects(bob.get(id), NotFound);
      await rejects(bob.history(id), NotFound);
      await rejects(bob.forget(id), NotFound);
      await rejects(bob.write("Bob takes it over", { supersedes_id: id }), NotFound);
    }
    const recalled = await bob.recall("bank PIN hint diary", { k: 100 });
    assert.ok(recalled.every((h) => h.memory.memory_type === "catalog" || h.memory.user_id === "bob"));
    assert.ok(!ids(recalled).includes(secret.id) && !ids(recalled).includes(turn.id));
    for (const type of ["episodic", "semantic", "procedural"] as const) {
      assert.ok((await bob.list(type, { limit: 1_000 })).every((m) => m.user_id === "bob"));
    }
    assert.deepEqual(await sarah.get(secret.id), secret); // untouched by Bob's attempts
    assert.equal((await sarah.recall("bank PIN hint", { k: 1 }))[0]?.memory.id, secret.id);
  });
});
