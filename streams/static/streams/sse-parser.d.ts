// Types of sse-parser.js (docs/js-client.md).

/** One event as the parser dispatches it. */
export interface ParsedEvent {
  /** The `event:` field, or "message" when the block had none. */
  type: string;
  /** The `data:` lines joined with "\n". */
  data: string;
  /** The last `id:` seen so far (ids persist from one event to the next). */
  lastEventId: string;
}

export interface SseParserOptions {
  /** Where the id starts (a reconnection's parser starts from the id it resumed with). Default "". */
  lastEventId?: string;
  /** Each event dispatched: a block with at least one `data:` line, ended by a blank line. */
  onEvent?: (event: ParsedEvent) => void;
  /** A `retry:` field of digits only: the new reconnection delay in milliseconds. */
  onRetry?: (ms: number) => void;
  /** A comment line (`:` and what follows it), such as the platform's keep-alive. */
  onComment?: (text: string) => void;
}

/** The event stream format as browsers read it (WHATWG HTML, "Interpreting an event stream"). */
export declare class SseParser {
  constructor(options?: SseParserOptions);
  onEvent: (event: ParsedEvent) => void;
  onRetry: (ms: number) => void;
  onComment: (text: string) => void;
  /** The id of the last block that ended (what a reconnection resumes from). */
  readonly lastEventId: string;
  /** Bytes as they arrive, split anywhere (UTF-8; a leading BOM is dropped, invalid bytes become U+FFFD). */
  push(bytes: Uint8Array): void;
  /** Text already decoded. */
  pushText(text: string): void;
  /** The input ended: an event without its closing blank line is discarded. */
  end(): void;
}
