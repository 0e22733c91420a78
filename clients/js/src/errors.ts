/** The SDK's errors: one class per way a call can fail, so callers branch on the class or `code`. */
import type { ErrorFrame } from "./types.js";

/** The server answered `ERROR` (protocol §4): `code` is what to branch on. */
export class QimError extends Error {
  readonly code: string;
  readonly reqId?: string;
  readonly retryAfterMs?: number;
  readonly frame: ErrorFrame;

  constructor(frame: ErrorFrame) {
    super(`${frame.code}: ${frame.message}`);
    this.name = "QimError";
    this.code = String(frame.code);
    this.reqId = frame.req_id;
    this.retryAfterMs = typeof frame.retry_after_ms === "number" ? frame.retry_after_ms : undefined;
    this.frame = frame;
  }
}

/** AUTH was refused (bad or revoked token: close 4401) or the socket closed during AUTH. */
export class AuthError extends Error {
  readonly code: string;
  readonly closeCode?: number;

  constructor(code: string, message: string, closeCode?: number) {
    super(`${code}: ${message}`);
    this.name = "AuthError";
    this.code = code;
    this.closeCode = closeCode;
  }
}

/** The socket is down (or went down) before the reply arrived; `closeCode` says how it closed. */
export class ConnectionLost extends Error {
  readonly closeCode?: number;

  constructor(message: string, closeCode?: number) {
    super(message);
    this.name = "ConnectionLost";
    this.closeCode = closeCode;
  }
}

/** No reply within the request timeout. A late reply is dropped, never taken for a push. */
export class RequestTimeout extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RequestTimeout";
  }
}

/** An HTTP error from the REST API, with the server's `{code, message}` body. */
export class RestError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;

  constructor(status: number, code: string, message: string, body: unknown) {
    super(`HTTP ${status} ${code}: ${message}`);
    this.name = "RestError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}
