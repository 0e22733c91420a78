/**
 * Presence (protocol §7): subscriptions belong to the socket, so they are renewed after every
 * reconnect; PRESENCE pushes are state, not toggles, and are kept as such.
 */
import type { QimConnection } from "./connection.js";
import { Emitter } from "./emitter.js";
import type { Frame, PresencePush } from "./types.js";

export interface PresenceEvents {
  [name: string]: unknown;
  change: { user_id: string; online: boolean };
}

export class Presence extends Emitter<PresenceEvents> {
  readonly online = new Map<string, boolean>();
  private readonly watched = new Set<string>();

  constructor(private readonly connection: QimConnection) {
    super();
    connection.on("push", (frame: Frame) => {
      if (frame.type === "PRESENCE") {
        const push = frame as PresencePush;
        this.set(push.user_id, push.online);
      }
    });
    connection.addReconnectHook(() => this.resubscribe());
    connection.on("connected", ({ reconnect }) => {
      if (!reconnect) void this.resubscribe().catch((error) => connection.emit("error", error));
    });
  }

  /** PRESENCE_SUB; answers the current state of each user (another tenant's reads offline). */
  async subscribe(userIds: string[]): Promise<Record<string, boolean>> {
    const ack = await this.connection.request<Frame & { presence: Record<string, boolean> }>("PRESENCE_SUB", {
      user_ids: userIds,
    });
    for (const id of userIds) this.watched.add(id);
    for (const [id, online] of Object.entries(ack.presence)) this.set(id, online);
    return ack.presence;
  }

  async unsubscribe(userIds: string[]): Promise<void> {
    await this.connection.request("PRESENCE_UNSUB", { user_ids: userIds });
    for (const id of userIds) {
      this.watched.delete(id);
      this.online.delete(id);
    }
  }

  /** Subscriptions belong to the socket: renew them on a new one. */
  private async resubscribe(): Promise<void> {
    if (this.watched.size > 0) await this.subscribe([...this.watched]);
  }

  isOnline(userId: string): boolean | undefined {
    return this.online.get(userId);
  }

  private set(userId: string, online: boolean): void {
    const before = this.online.get(userId);
    this.online.set(userId, online);
    if (before !== online) this.emit("change", { user_id: userId, online });
  }
}
