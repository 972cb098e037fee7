// The platform's client for page authors: docs/js-client.md. Plain ES module, no build step; types beside it in
// sse-client.d.ts.
//
// EventSource cannot send headers, so a guarded stream is read with fetch and a streaming body: the token goes in
// `authorization`, never in the URL. Unguarded streams use EventSource itself. Either way the client resumes from
// the last event id (docs/contract.md §4), answers `challenge` events with a token from the page (§6), and stops
// with the server's problem fields when a stream is refused for good (§2) or its token is revoked (§6). With
// `delta: "merge-patch"` it asks for deltas (§7) and applies each `patch` to the value it holds for the event's key,
// so the page gets whole values as `message` events all the same.

import { SseParser } from "./sse-parser.js";

export { SseParser };

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;
// What the platform sends (docs/contract.md §3, §7); EventSource mode relays these and any type a page listens to.
const SERVER_EVENTS = ["message", "delete", "reset", "caught-up", "challenge", "revoked"];
const CLIENT_EVENTS = new Set(["open", "error", "reconnecting", "renewal"]);
const CHALLENGE_ANSWER = { method: "POST", headers: { "content-type": "application/x-challenge-response" } };
// Refusals worth another attempt: the server or something before it is busy or unwell. Any other status is final,
// as it is for EventSource (a 404 for a deleted topic, a 401 or 403 for a token).
const RETRY_STATUSES = new Set([408, 429, 500, 502, 503, 504]);
// What `event: revoked` carries (docs/contract.md §6); the defaults when its data is not the platform's JSON.
const REVOKED = { type: "urn:sse-kafka-platform:problem:token-revoked", title: "Token revoked", status: 401 };

/** A refusal or a failure: the status and the fields of the RFC 9457 problem body the platform answers with. */
export class SseError extends Error {
  constructor(title, { status = 0, detail = "", type = "about:blank", problem = null, retryAfterMs = null,
    retryable = status === 0 || RETRY_STATUSES.has(status), cause } = {}) {
    super(detail ? `${title}: ${detail}` : title, cause === undefined ? undefined : { cause });
    this.name = "SseError";
    Object.assign(this, { status, title, detail, type, problem, retryAfterMs, retryable });
  }
}

/**
 * One stream, read until `close()` or a final refusal. An EventTarget: the platform's events arrive as
 * MessageEvents of their type; `open`, `reconnecting`, `renewal` and (final) `error` say how the client is doing.
 */
export class SseClient extends EventTarget {
  static CONNECTING = CONNECTING;
  static OPEN = OPEN;
  static CLOSED = CLOSED;

  #url;
  #transport;
  #token;
  #credentials;
  #retryMs;
  #maxRetryMs;
  #readyState = CONNECTING;
  #lastEventId;
  #attempt = 0;
  #types = new Set(SERVER_EVENTS);
  #handlers = new Map();
  #controller = null;
  #source = null;
  #timer = null;
  #wake = null;
  #values = null; // with deltas: each key's last whole value (the key as the key-form id names it)

  constructor(url, { token, transport = "auto", lastEventId = "", withCredentials = false, retryMs = 2000,
    maxRetryMs = 30000, delta } = {}) {
    super();
    if (token !== undefined && typeof token !== "function" && (typeof token !== "string" || token === "")) {
      throw new TypeError("SseClient: `token` is a non-empty string or a function that returns one");
    }
    if (!["auto", "fetch", "eventsource"].includes(transport)) {
      const given = JSON.stringify(transport);
      throw new TypeError(`SseClient: \`transport\` is "auto", "fetch" or "eventsource", not ${given}`);
    }
    if (transport === "eventsource" && token !== undefined) {
      throw new TypeError('SseClient: EventSource cannot send a token in a header; use transport "fetch" or "auto"');
    }
    for (const [name, value] of [["retryMs", retryMs], ["maxRetryMs", maxRetryMs]]) {
      if (!Number.isInteger(value) || value <= 0) throw new TypeError(`SseClient: \`${name}\` is a positive integer`);
    }
    if (typeof lastEventId !== "string") throw new TypeError("SseClient: `lastEventId` is a string");
    if (delta !== undefined && delta !== "merge-patch") {
      throw new TypeError(`SseClient: \`delta\` is "merge-patch" or left out, not ${JSON.stringify(delta)}`);
    }
    const address = new URL(url, globalThis.location?.href);
    if (delta !== undefined) {
      address.searchParams.set("delta", delta);
      this.#values = new Map();
      this.#types.add("patch");
    }
    this.#url = address.href;
    this.#transport = transport === "auto" ? (token === undefined ? "eventsource" : "fetch") : transport;
    this.#token = token;
    this.#credentials = withCredentials ? "include" : "same-origin";
    this.#retryMs = retryMs;
    this.#maxRetryMs = maxRetryMs;
    this.#lastEventId = lastEventId;
    const running = this.#transport === "fetch" ? this.#read() : Promise.resolve(this.#openSource(this.#resumeUrl()));
    running.catch((error) => this.#fail(asError(error)));
  }

  get url() { return this.#url; }
  get transport() { return this.#transport; }
  get readyState() { return this.#readyState; }
  get lastEventId() { return this.#lastEventId; }
  get onopen() { return this.#handlers.get("open") ?? null; }
  set onopen(handler) { this.#setHandler("open", handler); }
  get onmessage() { return this.#handlers.get("message") ?? null; }
  set onmessage(handler) { this.#setHandler("message", handler); }
  get onerror() { return this.#handlers.get("error") ?? null; }
  set onerror(handler) { this.#setHandler("error", handler); }

  addEventListener(type, listener, options) {
    super.addEventListener(type, listener, options);
    if (!CLIENT_EVENTS.has(type) && !this.#types.has(type)) {
      this.#types.add(type);
      this.#source?.addEventListener(type, this.#relay);
    }
  }

  /** Stop for good: the request is aborted (the server ends the stream) and no event follows. */
  close() {
    this.#readyState = CLOSED;
    clearTimeout(this.#timer);
    this.#wake?.();
    this.#controller?.abort();
    this.#source?.close();
    this.#source = null;
  }

  // ---- fetch: the token in a header ----

  async #read() {
    while (this.#readyState !== CLOSED) {
      let error = null;
      try {
        await this.#stream();
      } catch (caught) {
        error = asError(caught);
      }
      if (this.#readyState === CLOSED) return;
      if (error !== null && !error.retryable) {
        this.#fail(error);
        return;
      }
      await this.#pause(error);
    }
  }

  /** One request: resolves when the server ends the response, throws an SseError when it refuses. */
  async #stream() {
    const headers = { accept: "text/event-stream" };
    if (this.#token !== undefined) headers.authorization = `Bearer ${await this.#freshToken("connect")}`;
    if (this.#lastEventId !== "") headers["last-event-id"] = this.#lastEventId;
    if (this.#readyState === CLOSED) return;
    const controller = (this.#controller = new AbortController());
    try {
      const response = await fetch(this.#url, {
        headers, credentials: this.#credentials, cache: "no-store", signal: controller.signal,
      });
      if (response.status !== 200) throw await refusal(response);
      if (!isEventStream(response)) throw notAStream(response);
      this.#opened();
      const parser = new SseParser({
        lastEventId: this.#lastEventId,
        onEvent: (event) => this.#deliver(event),
        onRetry: (ms) => { this.#retryMs = ms; },
      });
      const reader = response.body.getReader();
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
        if (this.#readyState === CLOSED) return;
        parser.push(chunk.value);
        this.#lastEventId = parser.lastEventId;
      }
      parser.end();
    } finally {
      controller.abort();
    }
  }

  #deliver({ type: sent, data: given, lastEventId }) {
    if (this.#readyState === CLOSED) return;
    this.#lastEventId = lastEventId;
    const [type, data] = this.#whole(sent, given, lastEventId);
    this.dispatchEvent(new MessageEvent(type, { data, lastEventId, origin: new URL(this.#url).origin }));
    if (type === "challenge") this.#renew(data);
    else if (type === "revoked") this.#fail(revocation(data));
  }

  /** Answer a challenge (docs/contract.md §6): the request it describes, with a new token from the page. */
  async #renew(data) {
    let answer = CHALLENGE_ANSWER;
    try {
      const asked = JSON.parse(data);
      if (typeof asked?.method === "string") answer = { method: asked.method, headers: { ...asked.headers } };
    } catch {
      // not the platform's JSON: answer as the contract says
    }
    let detail;
    try {
      if (typeof this.#token !== "function") {
        throw new SseError("Cannot renew the token", {
          detail: "a challenge needs a new token: give `token` as a function", retryable: false,
        });
      }
      const token = await this.#freshToken("challenge");
      const response = await fetch(this.#url, {
        method: answer.method, headers: { ...answer.headers, authorization: `Bearer ${token}` },
        credentials: this.#credentials, cache: "no-store",
      });
      if (!response.ok) throw await refusal(response);
      detail = { ok: true, error: null };
    } catch (caught) {
      detail = { ok: false, error: asError(caught) };
    }
    if (this.#readyState !== CLOSED) this.dispatchEvent(new CustomEvent("renewal", { detail }));
  }

  async #freshToken(reason) {
    let token;
    try {
      token = typeof this.#token === "function" ? await this.#token(reason) : this.#token;
    } catch (caught) {
      throw new SseError("The token callback failed", { detail: asError(caught).message, cause: caught });
    }
    if (typeof token !== "string" || token === "") {
      throw new SseError("No token", { detail: "the token callback gave no token", retryable: false });
    }
    return token;
  }

  // ---- EventSource: no token to send ----

  #openSource(url) {
    const source = (this.#source = new EventSource(url, { withCredentials: this.#credentials === "include" }));
    source.onopen = () => {
      if (this.#source === source) this.#opened();
    };
    source.onerror = () => {
      if (this.#source !== source) return;
      if (source.readyState === EventSource.CONNECTING) {
        // Dropped: the browser reconnects by itself, after the server's retry delay, with Last-Event-ID.
        this.#readyState = CONNECTING;
        this.dispatchEvent(new CustomEvent("reconnecting", { detail: { attempt: null, delayMs: null, error: null } }));
        return;
      }
      source.close(); // the browser gave up: a status other than 200, or not an event stream
      this.#source = null;
      this.#diagnose().catch((error) => this.#fail(asError(error)));
    };
    for (const type of this.#types) source.addEventListener(type, this.#relay);
  }

  #relay = (event) => {
    if (this.#readyState === CLOSED || event.target !== this.#source) return;
    this.#lastEventId = event.lastEventId;
    const { lastEventId, origin } = event;
    const [type, data] = this.#whole(event.type, event.data, lastEventId);
    this.dispatchEvent(new MessageEvent(type, { data, lastEventId, origin }));
    if (event.type === "revoked") this.#fail(revocation(data)); // before the browser reconnects into the 401
  };

  /**
   * With deltas, what the page gets of an event: a `patch` applied to its key's last value, as a `message` with the
   * whole value; a `message` or `delete` recorded as its key's value. A patch for a key without a value (none can
   * come from the platform) is handed on as it is. Without deltas, the event as it came.
   */
  #whole(type, data, lastEventId) {
    const values = this.#values;
    if (values === null) return [type, data];
    const key = keyOf(lastEventId);
    if (key === null) return [type, data];
    if (type === "patch") {
      if (!values.has(key)) return [type, data];
      const value = mergePatch(values.get(key), JSON.parse(data));
      values.set(key, value);
      return ["message", JSON.stringify(value)];
    }
    if (type === "message") {
      const value = jsonObject(data);
      if (value === undefined) values.delete(key);
      else values.set(key, value);
    } else if (type === "delete") {
      values.delete(key);
    }
    return [type, data];
  }

  /** EventSource hides why it gave up: ask once with fetch, then stop with the problem or try again later. */
  async #diagnose() {
    let error = null;
    const controller = (this.#controller = new AbortController());
    try {
      const response = await fetch(this.#resumeUrl(), {
        headers: { accept: "text/event-stream" }, credentials: this.#credentials, cache: "no-store",
        signal: controller.signal,
      });
      if (response.status !== 200) error = await refusal(response);
      else if (!isEventStream(response)) error = notAStream(response);
    } catch (caught) {
      error = asError(caught);
    } finally {
      controller.abort(); // a stream that answers now is not read here: EventSource reads it again below
    }
    if (this.#readyState === CLOSED) return;
    if (error !== null && !error.retryable) {
      this.#fail(error);
      return;
    }
    await this.#pause(error);
    if (this.#readyState !== CLOSED) this.#openSource(this.#resumeUrl());
  }

  /** A new EventSource cannot set Last-Event-ID: the contract's `lastEventId` query parameter says it. */
  #resumeUrl() {
    if (this.#lastEventId === "") return this.#url;
    const url = new URL(this.#url);
    url.searchParams.set("lastEventId", this.#lastEventId);
    return url.href;
  }

  // ---- both ----

  #opened() {
    this.#readyState = OPEN;
    this.#attempt = 0;
    this.dispatchEvent(new Event("open"));
  }

  /** Wait before the next attempt: the retry delay doubled per failed attempt in a row, jittered, capped. */
  async #pause(error) {
    this.#readyState = CONNECTING;
    this.#attempt += 1;
    const ceiling = Math.min(this.#maxRetryMs, this.#retryMs * 2 ** Math.min(this.#attempt - 1, 20));
    const delayMs = Math.max(Math.round(ceiling / 2 + (Math.random() * ceiling) / 2), error?.retryAfterMs ?? 0);
    const detail = { attempt: this.#attempt, delayMs, error };
    this.dispatchEvent(new CustomEvent("reconnecting", { detail }));
    if (this.#readyState === CLOSED) return;
    await new Promise((resolve) => {
      this.#wake = resolve;
      this.#timer = setTimeout(resolve, delayMs);
    });
    this.#wake = this.#timer = null;
  }

  #fail(error) {
    if (this.#readyState === CLOSED) return;
    this.close();
    this.dispatchEvent(new ErrorEvent("error", { error, message: error.message }));
  }

  #setHandler(type, handler) {
    const old = this.#handlers.get(type);
    if (old) this.removeEventListener(type, old);
    this.#handlers.delete(type);
    if (typeof handler === "function") {
      this.#handlers.set(type, handler);
      this.addEventListener(type, handler);
    }
  }
}

/** The key a key-form event id names (`["<base64url key>","<etag id>"]`), or null. */
function keyOf(lastEventId) {
  if (!lastEventId.startsWith("[")) return null;
  try {
    const [key] = JSON.parse(lastEventId);
    return typeof key === "string" ? key : null;
  } catch {
    return null;
  }
}

/** The JSON object `data` holds, or undefined. */
function jsonObject(data) {
  try {
    const value = JSON.parse(data);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** RFC 7396: `patch` applied to `target`; a null member removes, an object merges, anything else replaces. */
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const result = target !== null && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [name, value] of Object.entries(patch)) {
    if (value === null) delete result[name];
    else result[name] = mergePatch(result[name], value);
  }
  return result;
}

function asError(caught) {
  if (caught instanceof SseError) return caught;
  const detail = caught instanceof Error ? caught.message : String(caught);
  return new SseError("The connection failed", { detail, cause: caught });
}

function isEventStream(response) {
  const type = response.headers.get("content-type") ?? "";
  return type.split(";", 1)[0].trim().toLowerCase() === "text/event-stream";
}

function notAStream(response) {
  const type = response.headers.get("content-type") ?? "none";
  const detail = `content-type is ${type}`;
  return new SseError("Not an event stream", { status: response.status, detail, retryable: false });
}

/** An SseError from a refusal: the problem body's type, title and detail when it has one. */
async function refusal(response) {
  let problem = null;
  try {
    const body = JSON.parse(await response.text());
    if (body !== null && typeof body === "object" && !Array.isArray(body)) problem = body;
  } catch {
    // no problem body: the status alone says it
  }
  const text = (value) => (typeof value === "string" ? value : "");
  return new SseError(text(problem?.title) || response.statusText || `HTTP ${response.status}`, {
    status: response.status,
    detail: text(problem?.detail),
    type: text(problem?.type) || "about:blank",
    problem,
    retryAfterMs: retryAfter(response.headers.get("retry-after")),
  });
}

/**
 * The final error of `event: revoked`: the token was revoked (docs/contract.md §6). Another request would only be
 * refused with the same 401, so it is not retried.
 */
function revocation(data) {
  let problem = null;
  try {
    const body = JSON.parse(data);
    if (body !== null && typeof body === "object" && !Array.isArray(body)) problem = body;
  } catch {
    // not the platform's JSON: the contract's fields stand in
  }
  const text = (value, fallback) => (typeof value === "string" && value !== "" ? value : fallback);
  return new SseError(text(problem?.title, REVOKED.title), {
    status: Number.isInteger(problem?.status) ? problem.status : REVOKED.status,
    detail: text(problem?.detail, ""),
    type: text(problem?.type, REVOKED.type),
    problem,
    retryable: false,
  });
}

/** `retry-after` in milliseconds: delay-seconds or an HTTP date (RFC 9110 §10.2.3). */
function retryAfter(value) {
  if (value === null) return null;
  if (/^[0-9]+$/.test(value.trim())) return Number.parseInt(value, 10) * 1000;
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, when - Date.now());
}
