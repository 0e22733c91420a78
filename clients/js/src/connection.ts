/**
 * One authenticated WebSocket session (protocol §2-§4): AUTH and its limits, request/reply by
 * `req_id`, pushes, close codes, and reconnect with jittered backoff. It knows no feature;
 * the feature modules listen to its frames and register reconnect hooks.
 */
import { Backoff, sleep } from "./backoff.js";
import { decodeFrame, encodeFrame } from "./codec.js";
import { Emitter } from "./emitter.js";
import { AuthError, ConnectionLost, QimError, RequestTimeout } from "./errors.js";
import {
  isFinalClose, messageText, openSession, type Session, type WebSocketConstructor, type WebSocketLike,
} from "./handshake.js";
import type { AuthOk, ErrorFrame, Frame } from "./types.js";
import { VERSION } from "./version.js";

export {
  CLOSE_AUTH_TIMEOUT, CLOSE_CREDENTIALS_REVOKED, CLOSE_FLOODING, CLOSE_TOO_SLOW, CLOSE_UNAUTHENTICATED,
  CLOSE_UNAVAILABLE, isFinalClose, type WebSocketConstructor, type WebSocketLike,
} from "./handshake.js";

export interface ConnectionOptions {
  /** `ws://host:port/ws/v1` */
  url: string;
  token: string;
  deviceId: string;
  clientVersion?: string;
  /** The WebSocket class; defaults to `globalThis.WebSocket` (browsers, Node >= 22). */
  WebSocket?: WebSocketConstructor;
  requestTimeoutMs?: number;
  /** Reconnect after a drop (never after 4401, 4403 or `close()`); default true. */
  reconnect?: boolean;
  backoff?: Backoff;
}

export interface CloseInfo {
  code: number;
  reason: string;
  willReconnect: boolean;
}

export interface ConnectionEvents {
  [name: string]: unknown;
  /** Every decoded inbound frame, replies included, in arrival order (rooms need both). */
  inbound: Frame;
  /** Frames that answer no pending request: pushes. */
  push: Frame;
  /** AUTH_OK of the first session and of every reconnect (after the hooks ran). */
  connected: { authOk: AuthOk; reconnect: boolean };
  disconnected: CloseInfo;
  /** Final: no more reconnects (close(), 4401, 4403, or a refused re-AUTH). */
  closed: { error?: Error; code?: number };
  /** Something went wrong in the background (a hook, a reconnect attempt). */
  error: Error;
}

/** A request a reconnect wrote behind AUTH, and its reply (rejecting as `request()` does). */
export interface SentRequest {
  frame: Frame;
  reply: Promise<Frame>;
}

/** Runs after a reconnect with the replies to the requests its catch-up wrote behind AUTH. */
type ReconnectHook = (sent: SentRequest[]) => Promise<void>;
/** The requests (type and fields, no req_id) a reconnect writes behind AUTH for one hook. */
type CatchUp = () => Frame[];

interface Pending {
  resolve: (frame: Frame) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

const ABANDONED_MEMORY = 1024;

export class QimConnection extends Emitter<ConnectionEvents> {
  readonly options: Required<Omit<ConnectionOptions, "WebSocket" | "clientVersion">> & {
    clientVersion?: string;
  };
  authOk: AuthOk | null = null;
  closeCode: number | undefined;
  lastError: Error | undefined;
  reconnects = 0;
  invalidFrames = 0;
  /** Requests written behind AUTH before its AUTH_OK came (reconnects' catch-ups). */
  pipelinedRequests = 0;
  private readonly WS: WebSocketConstructor;
  private ws: WebSocketLike | null = null;
  private connectedNow = false;
  private closing = false;
  private finished = false;
  private nextReqId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly abandoned: string[] = [];
  private readonly hooks: Array<{ hook: ReconnectHook; catchUp?: CatchUp }> = [];
  private cancelSleep: (() => void) | null = null;

  constructor(options: ConnectionOptions) {
    super();
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) {
      throw new TypeError("no global WebSocket: pass one (in Node 20: `import { WebSocket } from 'ws'`)");
    }
    this.WS = WS;
    this.options = {
      url: options.url,
      token: options.token,
      deviceId: options.deviceId,
      clientVersion: options.clientVersion ?? VERSION,
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      reconnect: options.reconnect ?? true,
      backoff: options.backoff ?? new Backoff(),
    };
  }

  get isConnected(): boolean {
    return this.connectedNow;
  }

  /** True once closed for good: `close()`, a 4401 or 4403, or a refused re-AUTH. */
  get isClosed(): boolean {
    return this.finished;
  }

  get userId(): string | undefined {
    return this.authOk?.user_id;
  }

  /**
   * Runs after every reconnect, in registration order, before `connected` is emitted. The
   * frames `catchUp` gives (built when the socket opens) are written right behind AUTH, and
   * the hook gets their replies: a reconnect's catch-up costs one round trip, not one each.
   */
  addReconnectHook(hook: ReconnectHook, catchUp?: CatchUp): void {
    this.hooks.push({ hook, catchUp });
  }

  /** Opens, AUTHs, returns AUTH_OK. The first connect never retries: it rejects instead. */
  async connect(): Promise<AuthOk> {
    if (this.ws !== null && !this.finished) throw new Error("already connected; close() first");
    this.closing = false;
    this.finished = false;
    this.lastError = undefined;
    const { ws, authOk, backlog } = await this.openAndAuthenticate();
    this.install(ws, authOk, backlog);
    this.emit("connected", { authOk, reconnect: false });
    return authOk;
  }

  /** Closes for good; pending requests fail with ConnectionLost. */
  close(): void {
    this.closing = true;
    this.cancelSleep?.();
    const ws = this.ws;
    this.ws = null;
    this.connectedNow = false;
    if (ws !== null) {
      ws.onclose = null;
      ws.onmessage = null;
      ws.close(1000, "client closing");
    }
    this.failPending(new ConnectionLost("client closed the connection", 1000));
    this.finish();
  }

  /** Resolves once authenticated (now or after a reconnect); rejects once closed for good. */
  waitConnected(timeoutMs = this.options.requestTimeoutMs): Promise<void> {
    if (this.connectedNow) return Promise.resolve();
    if (this.finished) return Promise.reject(new ConnectionLost("closed; will not reconnect", this.closeCode));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => done(new RequestTimeout(`not connected within ${timeoutMs} ms`)), timeoutMs);
      const offConnected = this.on("connected", () => done());
      const offClosed = this.on("closed", () => done(new ConnectionLost("closed; will not reconnect", this.closeCode)));
      const done = (error?: Error) => {
        clearTimeout(timer);
        offConnected();
        offClosed();
        if (error) reject(error);
        else resolve();
      };
    });
  }

  /** Sends `{type, req_id, ...fields}` and resolves with the reply echoing `req_id`. */
  request<T extends Frame = Frame>(type: string, fields: object = {}, timeoutMs?: number): Promise<T> {
    let ws: WebSocketLike;
    try {
      ws = this.requireSocket();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.requestOn<T>(ws, type, fields, timeoutMs);
  }

  private requestOn<T extends Frame = Frame>(ws: WebSocketLike, type: string, fields: object, timeoutMs?: number): Promise<T> {
    const reqId = `r${this.nextReqId++}`;
    const frame = { ...fields, type, req_id: reqId };
    const wait = timeoutMs ?? this.options.requestTimeoutMs;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(reqId);
        this.abandoned.push(reqId);
        if (this.abandoned.length > ABANDONED_MEMORY) this.abandoned.shift();
        reject(new RequestTimeout(`no reply to ${type} ${reqId} within ${wait} ms`));
      }, wait);
      this.pending.set(reqId, {
        timer,
        reject,
        resolve: (reply) => {
          if (reply.type === "ERROR") reject(new QimError(reply as ErrorFrame));
          else resolve(reply as T);
        },
      });
      try {
        ws.send(encodeFrame(frame));
      } catch (error) {
        clearTimeout(timer);
        this.pending.delete(reqId);
        reject(new ConnectionLost(`send failed: ${String(error)}`, this.closeCode));
      }
    });
  }

  /** Sends a frame without waiting for an answer (TYPING without req_id). */
  sendFrame(frame: Frame): void {
    this.requireSocket().send(encodeFrame(frame));
  }

  /** Test and tooling hook: drop the socket as a network failure would (then reconnect). */
  dropSocket(): void {
    this.ws?.close(4000, "dropped by the client for a test");
  }

  // Internals: handshake

  private async openAndAuthenticate(behindAuth?: (ws: WebSocketLike) => void): Promise<Session> {
    try {
      return await openSession(this.WS, this.options, behindAuth);
    } catch (error) {
      if (error instanceof AuthError || error instanceof ConnectionLost) this.closeCode = error.closeCode;
      // Requests written behind a refused (or unanswered) AUTH fail as on a lost connection.
      this.failPending(new ConnectionLost(`AUTH did not succeed: ${String(error)}`, this.closeCode));
      throw error;
    }
  }

  /** Each hook's catch-up requests, written on `ws` behind AUTH; their replies, per hook. */
  private writeCatchUps(ws: WebSocketLike): SentRequest[][] {
    return this.hooks.map(({ catchUp }) =>
      (catchUp?.() ?? []).map(({ type, ...fields }) => {
        const reply = this.requestOn(ws, String(type), fields);
        reply.catch(() => undefined); // awaited by the hook, or failed with the attempt
        this.pipelinedRequests += 1;
        return { frame: { type: String(type), ...fields }, reply };
      }),
    );
  }

  private install(ws: WebSocketLike, authOk: AuthOk, backlog: string[]): void {
    this.ws = ws;
    this.authOk = authOk;
    this.connectedNow = true;
    ws.onmessage = (event: { data: unknown }) => this.dispatch(messageText(event.data));
    ws.onclose = (event: { code: number; reason: string }) => void this.handleClose(ws, event);
    for (const text of backlog.splice(0)) this.dispatch(text);
  }

  // Internals: reading

  private dispatch(text: string): void {
    const frame = decodeFrame(text);
    if (frame === null) {
      this.invalidFrames += 1;
      return;
    }
    this.emit("inbound", frame);
    const reqId = frame.req_id;
    if (typeof reqId === "string") {
      const waiter = this.pending.get(reqId);
      if (waiter !== undefined) {
        this.pending.delete(reqId);
        clearTimeout(waiter.timer);
        waiter.resolve(frame);
        return;
      }
      if (this.abandoned.includes(reqId)) return; // a late reply, not a push
    }
    this.emit("push", frame);
  }

  // Internals: reconnecting

  private async handleClose(ws: WebSocketLike, event: { code: number; reason: string }): Promise<void> {
    if (ws !== this.ws) return;
    this.ws = null;
    this.connectedNow = false;
    this.closeCode = event.code;
    this.failPending(new ConnectionLost(`connection lost (${event.code})`, event.code));
    const final = this.closing || !this.options.reconnect || isFinalClose(event.code);
    this.emit("disconnected", { code: event.code, reason: event.reason, willReconnect: !final });
    if (final) {
      if (isFinalClose(event.code)) {
        this.lastError = new AuthError("unauthenticated", "the server revoked the session", event.code);
      }
      this.finish();
      return;
    }
    await this.reconnectLoop();
  }

  private async reconnectLoop(): Promise<void> {
    for (let attempt = 0; !this.closing; attempt++) {
      const pause = sleep(this.options.backoff.delayMs(attempt));
      this.cancelSleep = pause.cancel;
      await pause.promise;
      this.cancelSleep = null;
      if (this.closing) return;
      try {
        let sent: SentRequest[][] = [];
        const { ws, authOk, backlog } = await this.openAndAuthenticate((socket) => {
          sent = this.writeCatchUps(socket);
        });
        if (this.closing) {
          ws.close();
          this.failPending(new ConnectionLost("client closed the connection", 1000));
          return;
        }
        this.install(ws, authOk, backlog);
        this.reconnects += 1;
        await this.runHooks(sent);
        this.emit("connected", { authOk, reconnect: true });
        return;
      } catch (error) {
        if (error instanceof AuthError && (error.code === "unauthenticated" || isFinalClose(error.closeCode ?? 0))) {
          this.lastError = error; // a revoked token: retrying would loop forever
          this.finish();
          return;
        }
        this.emit("error", error instanceof Error ? error : new Error(String(error)));
      }
    }
  }

  private async runHooks(sent: SentRequest[][]): Promise<void> {
    for (const [index, { hook }] of this.hooks.entries()) {
      try {
        await hook(sent[index] ?? []);
      } catch (error) {
        this.emit("error", error instanceof Error ? error : new Error(String(error)));
      }
    }
  }

  // Internals: bookkeeping

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.emit("closed", { error: this.lastError, code: this.closeCode });
  }

  private requireSocket(): WebSocketLike {
    if (this.ws === null || !this.connectedNow) {
      throw new ConnectionLost(this.finished ? "not connected (closed)" : "not connected (reconnecting)", this.closeCode);
    }
    return this.ws;
  }

  private failPending(error: ConnectionLost): void {
    for (const waiter of this.pending.values()) {
      clearTimeout(waiter.timer);
      waiter.reject(error);
    }
    this.pending.clear();
  }
}
