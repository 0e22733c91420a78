/**
 * The tenant's custom message types (protocol §9), cached by `registry_version` and refreshed
 * by `since_version` on REGISTRY_UPDATED and whenever AUTH_OK shows a newer version. It
 * decides how to show a message: never fail on an unknown type, show its `preview`.
 */
import type { QimConnection } from "./connection.js";
import { Emitter } from "./emitter.js";
import type { CustomMessageType, Frame, Json, RegistryFrame, RenderDecision } from "./types.js";

export interface RegistryEvents {
  [name: string]: unknown;
  updated: { registry_version: number; changed: CustomMessageType[] };
}

/** What a room event (which has no server preview) shows for a type nobody knows. */
export const UNKNOWN_TYPE_TEXT = "[message]";

export class TypeRegistry extends Emitter<RegistryEvents> {
  version = 0;
  readonly types = new Map<string, CustomMessageType>();
  private refreshing: Promise<void> | null = null;
  private wanted = 0;

  constructor(private readonly connection: QimConnection, readonly track = true) {
    super();
    if (!track) return;
    connection.on("connected", ({ authOk }) => this.announce(authOk.registry_version));
    connection.on("push", (frame: Frame) => {
      if (frame.type === "REGISTRY_UPDATED") this.announce(frame.registry_version as number);
    });
  }

  /** The server is at `registryVersion`: fetch what changed if we are behind. */
  announce(registryVersion: number): void {
    if (typeof registryVersion !== "number" || registryVersion <= this.version) return;
    this.wanted = Math.max(this.wanted, registryVersion);
    void this.refresh().catch((error) => this.connection.emit("error", error));
  }

  /** REGISTRY_GET since our version; concurrent calls share one request. */
  refresh(): Promise<void> {
    if (this.refreshing !== null) return this.refreshing;
    this.refreshing = (async () => {
      do {
        const reply = await this.connection.request<RegistryFrame>("REGISTRY_GET", { since_version: this.version });
        this.apply(reply);
      } while (this.wanted > this.version);
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  /** Merges a REGISTRY reply (or a REST listing) into the cache. */
  apply(reply: { registry_version: number; types: CustomMessageType[] }): void {
    for (const type of reply.types) this.types.set(type.custom_type, type);
    if (reply.registry_version > this.version) this.version = reply.registry_version;
    this.wanted = Math.max(this.wanted, this.version);
    this.emit("updated", { registry_version: this.version, changed: reply.types });
  }

  get(customType: string): CustomMessageType | undefined {
    return this.types.get(customType);
  }

  /**
   * How to show a message of `contentType`: `text`, a known type (`custom`, with its row,
   * disabled ones included: old messages keep rendering) or `placeholder` for a type this
   * client has never heard of, which falls back to the server's `preview`.
   */
  render(contentType: string, payload: Json, preview?: string): RenderDecision {
    if (contentType === "text") {
      const text = payload !== null && typeof payload === "object" && !Array.isArray(payload) ? payload.text : undefined;
      return { kind: "text", fallback_text: typeof text === "string" ? text : preview ?? "" };
    }
    const type = this.types.get(contentType);
    const fallback = preview ?? UNKNOWN_TYPE_TEXT;
    if (type === undefined) return { kind: "placeholder", fallback_text: fallback };
    return { kind: "custom", type, fallback_text: fallback };
  }
}
