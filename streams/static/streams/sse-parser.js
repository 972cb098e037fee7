// The event stream format as browsers read it (WHATWG HTML, "Interpreting an event stream"), for
// sse-client.js and for pages that read a stream some other way. Plain ES module: docs/js-client.md.

/**
 * An event stream parser following the WHATWG rules ("Interpreting an event stream"): UTF-8 with a leading BOM
 * dropped, lines ended by CRLF, LF or CR (also across chunks), comments, `data` lines joined by LF, `event`,
 * `id` (ignored if it holds NUL; it persists to later events), `retry` (digits only), and an event at the end of
 * the input without its blank line discarded. `onEvent` gets {type, data, lastEventId} for each event dispatched.
 */
export class SseParser {
  #decoder = new TextDecoder();
  #pending = "";
  #afterCR = false;
  #data = [];
  #type = "";
  #idBuffer;
  #lastEventId;

  constructor({ lastEventId = "", onEvent = () => {}, onRetry = () => {}, onComment = () => {} } = {}) {
    // Browsers start a reconnection's parser from the id they resumed with; so do we (an id-less block must not
    // forget where the stream is).
    this.#idBuffer = this.#lastEventId = lastEventId;
    Object.assign(this, { onEvent, onRetry, onComment });
  }

  /** The id of the last event dispatched (or of the last block that set one): what a reconnection resumes from. */
  get lastEventId() {
    return this.#lastEventId;
  }

  /** Feed bytes as they arrive; a chunk may end anywhere, even inside a UTF-8 sequence or between CR and LF. */
  push(bytes) {
    this.pushText(this.#decoder.decode(bytes, { stream: true }));
  }

  pushText(text) {
    let start = 0;
    if (this.#afterCR && text.length > 0) {
      this.#afterCR = false;
      if (text.charCodeAt(0) === 10) start = 1; // the LF of a CRLF split across chunks
    }
    const breaks = /\r\n|\r|\n/g;
    breaks.lastIndex = start;
    for (let found = breaks.exec(text); found !== null; found = breaks.exec(text)) {
      const line = this.#pending + text.slice(start, found.index);
      this.#pending = "";
      start = breaks.lastIndex;
      if (found[0] === "\r" && start === text.length) this.#afterCR = true;
      this.#line(line);
    }
    this.#pending += text.slice(start);
  }

  /** The input ended: a last event without its blank line is dropped. */
  end() {
    this.pushText(this.#decoder.decode());
    this.#pending = "";
    this.#data = [];
    this.#type = "";
  }

  #line(line) {
    if (line === "") {
      this.#dispatch();
      return;
    }
    if (line.startsWith(":")) {
      this.onComment(line.slice(1));
      return;
    }
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#type = value;
    else if (field === "id" && !value.includes("\0")) this.#idBuffer = value;
    else if (field === "retry" && /^[0-9]+$/.test(value)) this.onRetry(Number.parseInt(value, 10));
  }

  #dispatch() {
    this.#lastEventId = this.#idBuffer;
    const data = this.#data;
    const type = this.#type || "message";
    this.#data = [];
    this.#type = "";
    if (data.length > 0) this.onEvent({ type, data: data.join("\n"), lastEventId: this.#lastEventId });
  }
}
