/**
 * Opening one socket and authenticating it (protocol §3): AUTH first, AUTH_OK back, or an
 * ERROR followed by close 4401. Also what the SDK needs of a WebSocket class, and close codes.
 */
import { decodeFrame, encodeFrame } from "./codec.js";
import { AuthError, ConnectionLost, RequestTimeout } from "./errors.js";
import type { AuthOk, ErrorFrame, Frame } from "./types.js";

/** §3: a bad (or revoked) token gets ERROR unauthenticated then close 4401: final. */
export const CLOSE_UNAUTHENTICATED = 4401;
/** §3: no AUTH within `auth_timeout_s`: transient (a stalled network), so we reconnect. */
export const CLOSE_AUTH_TIMEOUT = 4408;
/** The node closed a socket that did not read its pushes; reconnect and heal by SYNC. */
export const CLOSE_TOO_SLOW = 4429;
/** §3: the session's token was revoked or expired, or its user deactivated: final. */
export const CLOSE_CREDENTIALS_REVOKED = 4403;
/** §3: the socket sent frames far over its inbound budget; reconnect after the backoff. */
export const CLOSE_FLOODING = 4430;
/** §3: AUTH while the server's Redis is unreachable (ERROR unavailable); reconnect later. */
export const CLOSE_UNAVAILABLE = 4503;

/** Closes after which reconnecting with the same token can only be refused again. */
export function isFinalClose(code: number): boolean {
  return code === CLOSE_UNAUTHENTICATED || code === CLOSE_CREDENTIALS_REVOKED;
}

/** What the SDK needs of a WebSocket: the browser's, or the `ws` package's in Node. */
export interface WebSocketLike {
  readonly readyState: number;
  /* eslint-disable @typescript-eslint/no-explicit-any -- both DOM and `ws` event types fit */
  onopen: ((event: any) => void) | null;
  onmessage: ((event: any) => void) | null;
  onclose: ((event: any) => void) | null;
  onerror: ((event: any) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface Session {
  ws: WebSocketLike;
  authOk: AuthOk;
  /** Frames that came right behind AUTH_OK, before the caller took the socket over (replies
   * to requests written behind AUTH can share AUTH_OK's read): dispatch them first. */
  backlog: string[];
}

export interface HandshakeOptions {
  url: string;
  token: string;
  deviceId: string;
  clientVersion?: string;
  requestTimeoutMs: number;
}

const textDecoder = new TextDecoder();

/** A message's text, whether the WebSocket hands over a string or bytes. */
export function messageText(data: unknown): string {
  if (typeof data === "string") return data;
  if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return textDecoder.decode(data as ArrayBuffer);
  return String(data);
}

/**
 * Opens a socket and AUTHs. Rejects with AuthError (refused: 4401; or closed 4408), with
 * ConnectionLost (the socket closed otherwise), or RequestTimeout (no AUTH_OK in time).
 * `behindAuth` writes requests in the same turn as AUTH, before AUTH_OK (§3: the server
 * handles a socket's frames in order, AUTH first): a reconnect's catch-up in one round trip.
 */
export function openSession(
  WS: WebSocketConstructor,
  options: HandshakeOptions,
  behindAuth?: (ws: WebSocketLike) => void,
): Promise<Session> {
  const { url, token, deviceId, clientVersion, requestTimeoutMs } = options;
  return new Promise((resolve, reject) => {
    let ws: WebSocketLike;
    try {
      ws = new WS(url);
    } catch (error) {
      reject(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    let refusal: ErrorFrame | null = null;
    let settled = false;
    const backlog: string[] = [];
    const settle = (error: Error | null, authOk?: AuthOk) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error === null) resolve({ ws, authOk: authOk as AuthOk, backlog });
      else reject(error);
    };
    const timer = setTimeout(() => {
      settle(new RequestTimeout(`no AUTH_OK within ${requestTimeoutMs} ms`));
      ws.onclose = null;
      ws.close();
    }, requestTimeoutMs);
    ws.onopen = () => {
      const auth: Frame = { type: "AUTH", token, device_id: deviceId };
      if (clientVersion !== undefined) auth.client_version = clientVersion;
      ws.send(encodeFrame(auth));
      try {
        behindAuth?.(ws);
      } catch (error) {
        settle(error instanceof Error ? error : new Error(String(error)));
        ws.onclose = null;
        ws.close();
      }
    };
    ws.onmessage = (event: { data: unknown }) => {
      const text = messageText(event.data);
      if (settled) {
        backlog.push(text);
        return;
      }
      const frame = decodeFrame(text);
      if (frame?.type === "AUTH_OK") settle(null, frame as AuthOk);
      else if (frame?.type === "ERROR") refusal = frame as ErrorFrame; // the 4401 close follows
    };
    ws.onerror = () => undefined; // onclose follows with the code
    ws.onclose = (event: { code: number; reason: string }) => settle(closeError(refusal, event));
  });
}

function closeError(refusal: ErrorFrame | null, event: { code: number; reason: string }): Error {
  if (refusal !== null || isFinalClose(event.code)) {
    const code = refusal ? String(refusal.code) : "unauthenticated";
    return new AuthError(code, refusal?.message ?? (event.reason || "refused"), event.code);
  }
  if (event.code === CLOSE_AUTH_TIMEOUT) {
    return new AuthError("auth_timeout", "the server closed before AUTH completed", event.code);
  }
  return new ConnectionLost(`socket closed during AUTH (${event.code})`, event.code);
}
