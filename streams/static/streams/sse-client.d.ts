// Types of sse-client.js, the platform's client for page authors (docs/js-client.md).

import { SseParser } from "./sse-parser.js";

export { SseParser };
export type { ParsedEvent, SseParserOptions } from "./sse-parser.js";

/** Why the client asks for a token: before each request of the stream, or to answer a `challenge` event. */
export type TokenReason = "connect" | "challenge";

/** A bearer token, or a function giving a valid one (called before every request and for every challenge). */
export type TokenSource = string | ((reason: TokenReason) => string | Promise<string>);

export interface SseClientOptions {
  /** Send `authorization: Bearer <token>`; makes the client use fetch. A fixed string cannot answer challenges. */
  token?: TokenSource;
  /** "auto" (the default): "fetch" with a token, "eventsource" without. */
  transport?: "auto" | "fetch" | "eventsource";
  /** Resume from this event id on the first request (later ones use the last id received). */
  lastEventId?: string;
  /** Send cookies cross-origin (fetch `credentials: "include"`, EventSource `withCredentials`). Default false. */
  withCredentials?: boolean;
  /** The reconnection delay until the server's `retry:` line replaces it, in ms. Default 2000. */
  retryMs?: number;
  /** The longest wait between attempts, in ms. Default 30000. */
  maxRetryMs?: number;
  /**
   * "merge-patch": ask for deltas (`?delta=merge-patch`). The server then sends a key's value whole once and after
   * that, when shorter, an RFC 7396 JSON Merge Patch from the value it last sent; the client applies each patch to
   * the value it holds for the key and hands the page the whole value as a `message` event, as without deltas.
   */
  delta?: "merge-patch";
}

/** A refusal or a failure, with the RFC 9457 problem fields of the server's answer when there is one. */
export declare class SseError extends Error {
  readonly name: "SseError";
  /** The HTTP status; 0 when no answer came (network error, token callback failed). */
  readonly status: number;
  readonly title: string;
  readonly detail: string;
  /** The problem type URI; "about:blank" when the answer had none. */
  readonly type: string;
  /** The whole problem body (it may carry more members), or null. */
  readonly problem: Record<string, unknown> | null;
  /** The server's `retry-after`, in ms, or null. */
  readonly retryAfterMs: number | null;
  /** Whether the client tries again after it (network errors, 408, 429, 500, 502, 503, 504; never a revocation). */
  readonly retryable: boolean;
}

export interface ReconnectingDetail {
  /** Failed attempts in a row so far; null when EventSource reconnects by itself. */
  attempt: number | null;
  /** The wait before the next request, in ms; null when EventSource reconnects by itself. */
  delayMs: number | null;
  /** Why: null when the server ended the stream (a route change, the token's expiry) or EventSource reconnects. */
  error: SseError | null;
}

export interface RenewalDetail {
  /** Whether the challenge was answered (the server's answer was 2xx). */
  ok: boolean;
  error: SseError | null;
}

/** The final error: the client is closed (a refusal, a revoked token, a token callback that gave none). */
export interface SseErrorEvent extends ErrorEvent {
  readonly error: SseError;
}

export interface SseClientEventMap {
  open: Event;
  message: MessageEvent<string>;
  /** A tombstone: `data` is the record's key, base64url with padding (empty for a record without a key). */
  delete: MessageEvent<string>;
  /** `data` is JSON: {"partitions":[{"partition":p,"requested":o,"earliest":e}]}. */
  reset: MessageEvent<string>;
  "caught-up": MessageEvent<string>;
  /**
   * With `delta`: a patch for a key the client holds no value of, handed on as it came (the platform sends none;
   * every other patch is applied and arrives as a `message` with the whole value).
   */
  patch: MessageEvent<string>;
  /** The client answers it itself; a `renewal` event follows. */
  challenge: MessageEvent<string>;
  /**
   * The token was revoked and the server ended the stream: `data` is the problem JSON
   * ({"type","title","status","detail"}). The client stops: an `error` follows, whose SseError carries those fields.
   */
  revoked: MessageEvent<string>;
  reconnecting: CustomEvent<ReconnectingDetail>;
  renewal: CustomEvent<RenewalDetail>;
  error: SseErrorEvent;
}

export declare class SseClient extends EventTarget {
  static readonly CONNECTING: 0;
  static readonly OPEN: 1;
  static readonly CLOSED: 2;
  /** Throws a TypeError for options it cannot use. */
  constructor(url: string | URL, options?: SseClientOptions);
  /** The stream's absolute URL. */
  readonly url: string;
  readonly transport: "fetch" | "eventsource";
  readonly readyState: 0 | 1 | 2;
  /** The id of the last event received: where the next request resumes. */
  readonly lastEventId: string;
  onopen: ((this: SseClient, event: Event) => unknown) | null;
  onmessage: ((this: SseClient, event: MessageEvent<string>) => unknown) | null;
  onerror: ((this: SseClient, event: SseErrorEvent) => unknown) | null;
  addEventListener<K extends keyof SseClientEventMap>(
    type: K,
    listener: (this: SseClient, event: SseClientEventMap[K]) => unknown,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  removeEventListener<K extends keyof SseClientEventMap>(
    type: K,
    listener: (this: SseClient, event: SseClientEventMap[K]) => unknown,
    options?: boolean | EventListenerOptions,
  ): void;
  removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void;
  /** Stop for good: the request ends (the server closes the stream) and no event follows. */
  close(): void;
}
