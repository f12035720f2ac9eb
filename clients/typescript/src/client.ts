/**
 * `Client`: one user's memory in an Engram service (`engram serve`), over its REST API (`/v1`), with the
 * verbs of the Python `engram.Client` (and of the embedded `UserMemory`): rememberTurn, write, recall,
 * recordOutcome, get, forget, history, list, importJson, and userId. Results are the service's JSON rows, typed from its
 * OpenAPI document (src/openapi.ts, generated); failures are the errors of ./errors.ts, as in Python.
 *
 * Options are named as on the wire (`session_id`, `memory_types`...), so the API reference of the
 * service describes them; times are `Date`s (a string would be read by the server, or not).
 */

import type { components } from "./openapi.js";
import {
  ClientClosed,
  EngramError,
  ERROR_BY_CODE,
  ERROR_BY_STATUS,
  ImportFileError,
  InvalidInput,
  NotFound,
  ServiceUnavailable,
} from "./errors.js";

type Schemas = components["schemas"];
export type EpisodicMemory = Schemas["EpisodicMemory"];
export type SemanticMemory = Schemas["SemanticMemory"];
export type ProceduralMemory = Schemas["ProceduralMemory"];
export type CatalogItem = Schemas["CatalogItem"];
export type Memory = EpisodicMemory | SemanticMemory | ProceduralMemory | CatalogItem;
export type Hit = Schemas["Hit"];
export type CompactHit = Schemas["CompactHit"];
export type Tombstone = Schemas["Tombstone"];
export type Step = Schemas["StrictStep"];
export type MemoryType = "episodic" | "semantic" | "procedural";
export type UserDocument = Schemas["UserDocument"];
export type ImportReport = Record<string, unknown>;

/** Recall's hits; `shed` is true when the loaded service skipped the cross-encoder for this recall. */
export type Hits<H> = H[] & { shed: boolean };

type Times<K extends string> = { [key in K]?: Date | null };
export type RememberTurnOptions = Omit<Partial<Schemas["TurnCreate"]>, "text" | "at"> & Times<"at">;
export type WriteOptions = Omit<
  Partial<Schemas["MemoryCreate"]>,
  "text" | "valid_from" | "valid_to" | "created_at"
> &
  Times<"valid_from" | "valid_to" | "created_at">;
export type RecallOptions = Omit<
  Partial<Schemas["RecallRequest"]>,
  "query" | "as_of" | "view" | "time_from" | "time_to"
> &
  Times<"as_of" | "time_from" | "time_to">;
export interface ListOptions {
  include_superseded?: boolean;
  limit?: number;
  offset?: number;
}
export interface ClientOptions {
  /** Milliseconds each request may take (default 30 000). */
  timeout?: number;
  /** Another fetch (a proxy agent, a test double); default: the global fetch. */
  fetch?: typeof fetch;
}

/** The largest page GET /v1/memories serves; longer lists are fetched page by page. */
export const MAX_PAGE = 500;
const MAX_PAGE_BOUND = 1_000_000_000; // engram.limits.MAX_PAGE_BOUND: the bounds every store enforces
const NOT_FOUND = /^(\w+) ('.*'|".*") not found$/s;

// What each answer must look like to be read as Engram's (the Python client validates it fully).
type Answer = Record<string, unknown>;
type Shape = (body: Answer) => boolean;
const ME: Shape = (b) => typeof b["user_id"] === "string";
const ROW: Shape = (b) => typeof b["id"] === "string" && typeof b["memory_type"] === "string";
const ROWS: Shape = (b) => Array.isArray(b["data"]);
const HITS: Shape = (b) => Array.isArray(b["hits"]);
const FORGOTTEN: Shape = (b) => typeof b["forgotten"] === "object" && b["forgotten"] !== null;

interface Sent {
  method: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
  query?: Record<string, string | number | boolean>;
}

export class Client {
  readonly baseUrl: string;
  readonly #headers: Record<string, string>;
  readonly #timeout: number;
  readonly #fetch: typeof fetch;
  #closed = false;
  #userId: string | undefined;

  /**
   * `baseUrl` is where the service answers (`http://127.0.0.1:8765`, or behind a proxy
   * `https://host/engram`); `apiKey` a user key (`engram keys create --user U`), which decides whose
   * memory this is.
   */
  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    if (typeof apiKey !== "string" || !/^[\x20-\x7e]*$/.test(apiKey)) {
      throw new InvalidInput("apiKey must be a string of printable ASCII characters (an Engram key)");
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#headers = { Accept: "application/json" };
    if (apiKey) this.#headers["Authorization"] = `Bearer ${apiKey}`; // none rather than empty: a 401
    this.#timeout = options.timeout ?? 30_000;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** The user whose memory the key opens (asked of the service once). */
  async userId(): Promise<string> {
    this.#userId ??= (await this.#call<Schemas["Me"]>({ method: "GET", path: "/v1/me" }, ME)).user_id;
    return this.#userId;
  }

  /** The client sends nothing afterwards (ClientClosed). */
  close(): void {
    this.#closed = true;
  }

  /** Store one user turn verbatim (episodic), visible to the very next recall. */
  async rememberTurn(text: string, options: RememberTurnOptions = {}): Promise<EpisodicMemory> {
    const body = { ...options, text, at: iso(options.at, "at"), metadata: options.metadata ?? {} };
    return this.#call({ method: "POST", path: "/v1/turns", body: json(body) }, ROW);
  }

  /**
   * Write a fact (semantic, the default) or a playbook (`memory_type: "procedural"`); with
   * `supersedes_id` the new row replaces that live row atomically (`contradiction` "natural" or "harsh").
   */
  async write(text: string, options: WriteOptions = {}): Promise<SemanticMemory | ProceduralMemory> {
    const body = {
      ...options,
      text,
      valid_from: iso(options.valid_from, "valid_from"),
      valid_to: iso(options.valid_to, "valid_to"),
      created_at: iso(options.created_at, "created_at"),
    };
    return this.#call({ method: "POST", path: "/v1/memories", body: json(body) }, ROW);
  }

  /**
   * Search all of the user's memory types and the catalog in one call, best first; each hit's `explain`
   * shows how its score was made. `view: "compact"` returns CompactHits (a fraction of the bytes).
   */
  recall(query: string, options?: RecallOptions & { view?: "full" }): Promise<Hits<Hit>>;
  recall(query: string, options: RecallOptions & { view: "compact" }): Promise<Hits<CompactHit>>;
  async recall(
    query: string,
    options: RecallOptions & { view?: "full" | "compact" } = {},
  ): Promise<Hits<Hit> | Hits<CompactHit>> {
    const body = {
      ...options,
      query,
      as_of: iso(options.as_of, "as_of"),
      time_from: iso(options.time_from, "time_from"),
      time_to: iso(options.time_to, "time_to"),
    };
    const answer = await this.#call<Schemas["RecallResponse"] | Schemas["CompactRecallResponse"]>(
      { method: "POST", path: "/v1/recall", body: json(body) },
      HITS,
    );
    // Not enumerable: the hits compare, print and serialise as the plain array they are.
    return Object.defineProperty(answer.hits, "shed", { value: answer.shed, enumerable: false }) as
      Hits<Hit> | Hits<CompactHit>;
  }

  /**
   * Count one use of one of the user's playbooks as a success or a failure (no LLM involved); the
   * playbook with its counts after the change. NotFound for another user's playbook.
   */
  async recordOutcome(playbookId: string, success: boolean): Promise<ProceduralMemory> {
    const sent: Sent = {
      method: "POST",
      path: memoryPath(playbookId, "playbooks") + "/outcome",
      body: json({ success }),
    };
    return this.#call(sent, ROW);
  }

  /** One of the user's rows, or a catalog row; NotFound otherwise (also for other users' ids). */
  async get(memoryId: string): Promise<Memory> {
    return this.#call({ method: "GET", path: memoryPath(memoryId) }, ROW);
  }

  /**
   * Hard-delete one of the user's rows; an audit tombstone without text remains. A fact a harsh
   * correction retracted stays retracted when the correction is forgotten, unless `revive_retracted`.
   */
  async forget(memoryId: string, options: { revive_retracted?: boolean } = {}): Promise<Tombstone> {
    const query = options.revive_retracted ? { revive_retracted: true } : undefined;
    const sent: Sent = { method: "DELETE", path: memoryPath(memoryId), ...(query && { query }) };
    return (await this.#call<Schemas["ForgetResponse"]>(sent, FORGOTTEN)).forgotten;
  }

  /** The supersession chain that contains `memoryId`, oldest first. */
  async history(memoryId: string): Promise<Memory[]> {
    const sent: Sent = { method: "GET", path: memoryPath(memoryId) + "/history" };
    return (await this.#call<Schemas["MemoryList"]>(sent, ROWS)).data;
  }

  /** The user's rows of one type, newest first, paged; a limit over 500 is fetched in several requests. */
  async list(memoryType: MemoryType, options: ListOptions = {}): Promise<Memory[]> {
    const { include_superseded = false, limit = 50, offset = 0 } = options;
    const page = async (limit: number, offset: number): Promise<Memory[]> => {
      const query = { type: memoryType, include_superseded, limit, offset };
      return (await this.#call<Schemas["MemoryList"]>({ method: "GET", path: "/v1/memories", query }, ROWS))
        .data;
    };
    if (!Number.isInteger(limit) || limit <= MAX_PAGE) return page(limit, offset);
    if (!(limit <= MAX_PAGE_BOUND && Number.isInteger(offset) && offset >= 0 && offset <= MAX_PAGE_BOUND)) {
      throw new InvalidInput(`limit must be in [1, ${MAX_PAGE_BOUND}] and offset in [0, ${MAX_PAGE_BOUND}]`);
    }
    const rows: Memory[] = [];
    while (rows.length < limit) {
      const want = Math.min(limit - rows.length, MAX_PAGE);
      const got = await page(want, offset + rows.length);
      rows.push(...got);
      if (got.length < want) break; // the last page
    }
    return rows;
  }

  /**
   * Import a user document into the user's memory; an invalid one writes nothing (ImportFileError).
   * Sent with an Idempotency-Key made from the document, so the service runs it as a job and this call
   * waits for it however long it takes; the same document sent again joins the run still going.
   */
  async importJson(document: UserDocument | Record<string, unknown>): Promise<ImportReport> {
    const body = json(document);
    const { subtle } = globalThis.crypto ?? (await import("node:crypto")).webcrypto; // node 18: no global
    const digest = await subtle.digest("SHA-256", new TextEncoder().encode(body));
    const key = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    const query = { wait: Math.min(this.#timeout / 2000, 60) }; // answered 202 well within the timeout
    const post: Sent = {
      method: "POST",
      path: "/v1/import",
      body,
      headers: { "Idempotency-Key": key },
      query,
    };
    const poll: Sent = { method: "GET", path: `/v1/import/${key}`, query };
    let [sent, response] = [post, await this.#send(post)];
    // 202: still running, ask again; 404 to a poll: a server process that does not know the job
    // (another worker, a restart), so send the import again, which joins or finishes it there.
    while (response.status === 202 || (response.status === 404 && sent === poll)) {
      sent = response.status === 202 ? poll : post;
      response = await this.#send(sent);
    }
    try {
      return await this.#read<ImportReport>(response, sent);
    } catch (error) {
      if (error instanceof InvalidInput && !(error instanceof ImportFileError)) {
        throw new ImportFileError(error.message, error.status); // validated as the request body
      }
      throw error;
    }
  }

  // -- HTTP --------------------------------------------------------------------------------------
  async #call<T>(sent: Sent, shape: Shape): Promise<T> {
    return this.#read<T>(await this.#send(sent), sent, shape);
  }

  async #send(sent: Sent): Promise<Response> {
    if (this.#closed) throw new ClientClosed(`Client(${this.baseUrl}) is closed: make a new Client`);
    let url: URL;
    try {
      url = new URL(this.baseUrl + sent.path);
    } catch {
      // "127.0.0.1:8765" without http://: an Engram error, as the Python client says it
      throw new ServiceUnavailable(
        `${this.baseUrl}: not a URL (missing an 'http://' or 'https://' protocol?)`,
      );
    }
    for (const [name, value] of Object.entries(sent.query ?? {})) url.searchParams.set(name, String(value));
    const headers = { ...this.#headers, ...sent.headers };
    if (sent.body !== undefined) headers["Content-Type"] = "application/json";
    try {
      return await this.#fetch(url, {
        method: sent.method,
        headers,
        ...(sent.body !== undefined && { body: sent.body }),
        signal: AbortSignal.timeout(this.#timeout),
      });
    } catch (error) {
      // Unreachable, refused, timed out: fetch says TypeError ("fetch failed") or a TimeoutError.
      const cause = error instanceof Error ? (error.cause ?? error) : error;
      const what = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
      throw new ServiceUnavailable(`${this.baseUrl}: ${what}`);
    }
  }

  /** The answer, if it is a success of the expected shape; else the error it stands for. */
  async #read<T>(response: Response, sent: Sent, shape: Shape = () => true): Promise<T> {
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      throw new ServiceUnavailable(`${this.baseUrl}: ${String(error)}`);
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new ServiceUnavailable(this.#odd(response, sent));
    }
    if (response.ok) {
      if (typeof body !== "object" || body === null || !shape(body as Answer)) {
        throw new ServiceUnavailable(this.#odd(response, sent)); // answered, but not as Engram does
      }
      return body as T;
    }
    throw this.#error(response, sent, body);
  }

  /** The EngramError a non-2xx answer stands for: by its code, else by its status. */
  #error(response: Response, sent: Sent, body: unknown): EngramError {
    const { error: code, message } = (typeof body === "object" && body !== null ? body : {}) as Record<
      string,
      unknown
    >;
    if (typeof code !== "string" || typeof message !== "string") {
      return new ServiceUnavailable(this.#odd(response, sent)); // not an Engram service: a proxy, a wrong URL
    }
    if (code === "not_found" || (!(code in ERROR_BY_CODE) && response.status === 404)) {
      const found = NOT_FOUND.exec(message);
      // A 404 that names no row is a route the service lacks: a wrong baseUrl, or an older server.
      if (!found)
        return new ServiceUnavailable(this.#odd(response, sent) + " (no such route: is baseUrl right?)");
      return new NotFound(message, unquote(found[2] ?? ""), response.status);
    }
    const Kind = ERROR_BY_CODE[code] ?? ERROR_BY_STATUS[response.status] ?? EngramError;
    const error = new Kind(message, response.status);
    error.code = code; // the service's own, e.g. "forbidden" or "internal_error"
    return error;
  }

  #odd(response: Response, sent: Sent): string {
    const path = new URL(this.baseUrl + sent.path).pathname;
    return `${this.baseUrl} did not answer as an Engram service: HTTP ${response.status} to ${sent.method} ${path}`;
  }
}

/** A row's route: every character escaped (dots too: "." or ".." would be read as path steps). */
function memoryPath(memoryId: string, collection: "memories" | "playbooks" = "memories"): string {
  const segment = String(memoryId);
  if (!segment || segment.includes("/")) throw new NotFound(`memory '${segment}' not found`, segment);
  return `/v1/${collection}/` + encodeURIComponent(segment).replace(/\./g, "%2E");
}

/** A time as ISO 8601; only a valid Date (JSON cannot carry one, and a string would be guessed at). */
function iso(at: Date | null | undefined, name: string): string | null {
  if (at === undefined || at === null) return null;
  if (!(at instanceof Date) || Number.isNaN(at.getTime()))
    throw new InvalidInput(`${name} must be a valid Date`);
  return at.toISOString();
}

function json(body: unknown): string {
  const text = JSON.stringify(body, (_key, value: unknown) => {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new InvalidInput(`the request cannot be sent as JSON: ${value} is not a JSON number`);
    }
    return value;
  });
  return text;
}

/** The id inside a Python repr ('x' or "x"), as the service's NotFound message quotes it. */
function unquote(quoted: string): string {
  return quoted.slice(1, -1).replace(/\\(.)/g, "$1");
}
