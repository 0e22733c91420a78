/**
 * QimClient: one device's session with every feature wired to it. Construct, `connect()`,
 * then use `messages`, `mailbox`, `rooms`, `presence`, `calls`, `registry`.
 */
import { QimConnection, type ConnectionOptions } from "./connection.js";
import { Messaging } from "./messaging.js";
import { Presence } from "./presence.js";
import { TypeRegistry } from "./registry.js";
import { Rooms } from "./rooms.js";
import { Calls } from "./rtc.js";
import { type CursorStore, MailboxSync } from "./sync.js";
import type { AuthOk, Frame, LiveEvent, Limits, MailboxEvent, Message, RoomEvent } from "./types.js";

export interface ClientOptions extends ConnectionOptions {
  /** Where the mailbox cursor lives (default: memory). */
  cursorStore?: CursorStore;
  /** SYNC page size (default 200). */
  syncPageSize?: number;
  /** Keep the registry current (default true). */
  trackRegistry?: boolean;
}

export class QimClient {
  readonly connection: QimConnection;
  readonly registry: TypeRegistry;
  readonly mailbox: MailboxSync;
  readonly messages: Messaging;
  readonly presence: Presence;
  readonly rooms: Rooms;
  readonly calls: Calls;

  constructor(options: ClientOptions) {
    this.connection = new QimConnection(options);
    this.registry = new TypeRegistry(this.connection, options.trackRegistry ?? true);
    const renderMessage = (message: Message) => {
      message.render = this.registry.render(message.content_type, message.payload, message.preview);
    };
    const renderEvent = (event: MailboxEvent | LiveEvent) => {
      if (event.message) renderMessage(event.message);
    };
    const renderRoomEvent = (event: RoomEvent) => {
      event.render = this.registry.render(event.content_type, event.payload);
    };
    this.mailbox = new MailboxSync(this.connection, options.cursorStore, options.syncPageSize, renderEvent);
    this.messages = new Messaging(this.connection, renderMessage);
    this.presence = new Presence(this.connection);
    this.rooms = new Rooms(this.connection, renderRoomEvent);
    this.calls = new Calls(this.connection);
  }

  /** Opens and authenticates; then the mailbox catches up by itself (`mailbox.on("synced")`). */
  connect(): Promise<AuthOk> {
    return this.connection.connect();
  }

  close(): void {
    this.connection.close();
  }

  get userId(): string | undefined {
    return this.connection.userId;
  }

  /** The server's windows and rates from AUTH_OK (§3). */
  get limits(): Limits | undefined {
    return this.connection.authOk?.limits;
  }

  /** Listen to one push type (`"TYPING"`, `"REACTION_UPDATE"`, `"EPHEMERAL"`...). */
  onPush(type: string, listener: (frame: Frame) => void): () => void {
    return this.connection.on("push", (frame) => {
      if (frame.type === type) listener(frame);
    });
  }

  /** PING -> PONG: a liveness check and a clock reading. */
  async ping(): Promise<number> {
    const pong = await this.connection.request<Frame & { server_time_ms: number }>("PING");
    return pong.server_time_ms;
  }
}
