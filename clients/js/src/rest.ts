/**
 * The REST calls a client needs (protocol §13), over `fetch` (browsers, Node >= 18). Bodies
 * are parsed by the lossless codec, so `latest_room_seq` arrives as a `bigint`. Errors become
 * RestError with the server's `{code, message}`.
 */
import { parseJson, stringifyJson } from "./codec.js";
import { RestError } from "./errors.js";
import type { CustomMessageType, GroupPolicy, GroupRole, MailboxTier } from "./types.js";

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

// Answers, named after the schema's components (checked against /api/v1/schema/ by the tests).
/** `expires_at_ms` is null unless the server sets QIM_TOKEN_TTL_S. */
export interface LoginAnswer { token: string; user_id: string; expires_at_ms: number | null } // TokenResponse
export interface UserIdAnswer { user_id: string } // UserId
export interface ConversationIdAnswer { conversation_id: string } // ConversationId
export interface ConversationSeqAnswer { conversation_seq: number } // ConversationSeq
export interface EventSeqAnswer { event_conversation_seq: number } // EventSeq
/** A conversation's settings, as every member (and former member) may read them (§17.1). */
export interface GroupSettings {
  conversation_id: string;
  kind: "group" | "direct";
  title: string;
  mention_all_policy: GroupPolicy;
  add_members_policy: GroupPolicy;
  member_count: number;
}
/** GET conversations/{id}: the settings with your own role and tier, and whether you are a member now. */
export interface ConversationInfo extends GroupSettings { role: GroupRole; tier: MailboxTier; member: boolean } // ConversationSettings
/** PATCH conversations/{id}: the settings and the event's seq (null when nothing changed). */
export interface GroupUpdateAnswer extends GroupSettings { conversation_seq: number | null } // ConversationSettings
export interface GroupChanges { title?: string; mention_all_policy?: GroupPolicy; add_members_policy?: GroupPolicy }
/** PATCH conversations/{id}/members/{user_id}: `conversation_seq` is the role event's (null: no change; absent for a tier). */
export interface MemberChangeAnswer { user_id: string; role?: GroupRole; tier?: MailboxTier; conversation_seq?: number | null } // MemberChange
export interface GroupMember { user_id: string; display_name: string; role: GroupRole } // MemberItem
/** One page of current members by user id; `next` is the `after` of the next page, null at the end. */
export interface MemberPage { members: GroupMember[]; next: string | null } // MemberPage
export interface IceServer { urls: string[] | string; username: string; credential: string }
export interface IceServers { ice_servers: IceServer[]; ttl_s: number }
export interface RoomInfo {
  room_id: string;
  title: string;
  online_count: number;
  room_epoch: number;
  latest_room_seq: bigint;
  promoted_to?: string | null;
}
export interface PushRegistration { platform: "ios" | "android"; push_token: string; voip_token?: string }
/** A browser's `PushSubscription.toJSON()`; only `endpoint` and `keys` are sent. */
export interface WebPushSubscriptionJson {
  endpoint: string;
  keys: { p256dh: string; auth: string };
  expirationTime?: number | null;
}
export type TypeFields = Partial<Omit<CustomMessageType, "version">> & { custom_type: string };

/** The paths this client calls, checked against `/api/v1/schema/` by the tests. */
export const REST_PATHS = [
  "/api/v1/auth/token", "/api/v1/users", "/api/v1/conversations", "/api/v1/conversations/{id}",
  "/api/v1/conversations/{id}/members", "/api/v1/conversations/{id}/members/{user_id}",
  "/api/v1/devices/{device_id}/push", "/api/v1/rooms", "/api/v1/rooms/{room_id}",
  "/api/v1/rooms/{room_id}/promote", "/api/v1/moderation/recall", "/api/v1/registry/types",
  "/api/v1/registry/types/{custom_type}", "/api/v1/rtc/ice-servers", "/api/v1/health",
  "/api/v1/users/{user_id}/deactivate", "/api/v1/push/vapid-public-key",
] as const;

export class RestClient {
  private readonly base: string;
  private readonly fetchImpl: FetchLike;

  /** `baseUrl` is the server's origin, e.g. `http://127.0.0.1:8000`. */
  constructor(baseUrl: string, public token?: string, fetchImpl?: FetchLike) {
    this.base = baseUrl.replace(/\/+$/, "") + "/api/v1/";
    this.fetchImpl = fetchImpl ?? ((input, init) => globalThis.fetch(input, init));
  }

  /** Any call: `path` relative to `/api/v1/`; answers the parsed body (undefined for 204). */
  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.token) headers.Authorization = `Token ${this.token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.fetchImpl(this.base + path, {
      method,
      headers,
      body: body === undefined ? undefined : stringifyJson(body),
    });
    const text = await response.text();
    const parsed = text === "" ? undefined : safeParse(text);
    if (!response.ok) {
      const error = (parsed ?? {}) as { code?: string; message?: string };
      throw new RestError(response.status, error.code ?? "http_error", error.message ?? response.statusText, parsed);
    }
    return parsed as T;
  }

  /** POST auth/token; keeps the token for later calls. */
  async login(tenant: string, username: string, password: string, deviceId: string): Promise<LoginAnswer> {
    const answer = await this.call<LoginAnswer>("POST", "auth/token", { tenant, username, password, device_id: deviceId });
    this.token = answer.token;
    return answer;
  }

  /** DELETE auth/token: revokes the token this client holds; its sockets close with 4403. */
  async logout(): Promise<void> {
    await this.call<void>("DELETE", "auth/token");
    this.token = undefined;
  }

  /** POST users/{id}/deactivate (tenant admin): every token of that user is revoked. */
  deactivateUser(userId: string): Promise<unknown> {
    return this.call("POST", `users/${enc(userId)}/deactivate`);
  }

  createUser(username: string, password: string, displayName?: string): Promise<UserIdAnswer> {
    return this.call("POST", "users", { username, password, ...(displayName ? { display_name: displayName } : {}) });
  }

  createConversation(kind: "group" | "direct", memberUserIds: string[], options: { title?: string; e2ee?: boolean } = {}): Promise<ConversationIdAnswer> {
    return this.call("POST", "conversations", { kind, member_user_ids: memberUserIds, ...options });
  }

  addMembers(conversationId: string, userIds: string[]): Promise<ConversationSeqAnswer> {
    return this.call("POST", `conversations/${enc(conversationId)}/members`, { user_ids: userIds });
  }

  /** Leave (your own id) or remove someone (the owner anyone, an admin members, §17.1). */
  removeMember(conversationId: string, userId: string): Promise<ConversationSeqAnswer> {
    return this.call("DELETE", `conversations/${enc(conversationId)}/members/${enc(userId)}`);
  }

  /** GET conversations/{id}: its title and policies, your role and tier (members and former members). */
  getConversation(conversationId: string): Promise<ConversationInfo> {
    return this.call("GET", `conversations/${enc(conversationId)}`);
  }

  /** PATCH conversations/{id}: rename a group or set its policies (owner and admins). */
  updateConversation(conversationId: string, changes: GroupChanges): Promise<GroupUpdateAnswer> {
    return this.call("PATCH", `conversations/${enc(conversationId)}`, changes);
  }

  /** One page of current members, ordered by user id, after `after` (exclusive); `limit` 1-1000 (100). */
  listMembers(conversationId: string, page: { after?: string; limit?: number } = {}): Promise<MemberPage> {
    const query = new URLSearchParams();
    if (page.after !== undefined) query.set("after", page.after);
    if (page.limit !== undefined) query.set("limit", String(page.limit));
    const text = query.toString();
    return this.call("GET", `conversations/${enc(conversationId)}/members${text ? `?${text}` : ""}`);
  }

  /** Every current member, a page at a time, following `next`. */
  async *memberPages(conversationId: string, limit?: number): AsyncGenerator<GroupMember[]> {
    let after: string | undefined;
    for (;;) {
      const page = await this.listMembers(conversationId, { after, limit });
      if (page.members.length > 0) yield page.members;
      if (page.next === null || page.members.length === 0) return;
      after = page.next;
    }
  }

  /** Make a member an admin or a member again, or hand them ownership (`owner`): the owner only. */
  setMemberRole(conversationId: string, userId: string, role: GroupRole): Promise<MemberChangeAnswer> {
    return this.call("PATCH", `conversations/${enc(conversationId)}/members/${enc(userId)}`, { role });
  }

  /** Your own mailbox tier in a conversation (§17.4); `userId` must be yours (403 otherwise). */
  setTier(conversationId: string, userId: string, tier: MailboxTier): Promise<MemberChangeAnswer> {
    return this.call("PATCH", `conversations/${enc(conversationId)}/members/${enc(userId)}`, { tier });
  }

  registerPush(deviceId: string, registration: PushRegistration): Promise<{ device_id: string; platform: string }> {
    return this.call("POST", `devices/${enc(deviceId)}/push`, registration);
  }

  /** DELETE devices/{id}/push: the device's tokens or Web Push subscription are forgotten. */
  unregisterPush(deviceId: string): Promise<void> {
    return this.call("DELETE", `devices/${enc(deviceId)}/push`);
  }

  /** GET push/vapid-public-key: the `applicationServerKey` for `pushManager.subscribe()`
   * (base64url of the uncompressed P-256 point); 404 `not_found` when Web Push is not
   * configured for the tenant. */
  async vapidPublicKey(): Promise<string> {
    return (await this.call<{ public_key: string }>("GET", "push/vapid-public-key")).public_key;
  }

  /** POST devices/{id}/push with platform `web`: the server pushes to this subscription while
   * the device is offline. 400 `bad_request` when the endpoint is not an allowed push service. */
  setWebPushSubscription(deviceId: string, subscription: WebPushSubscriptionJson): Promise<{ device_id: string; platform: string }> {
    const { endpoint, keys } = subscription;
    return this.call("POST", `devices/${enc(deviceId)}/push`, {
      platform: "web", subscription: { endpoint, keys: { p256dh: keys?.p256dh, auth: keys?.auth } },
    });
  }

  createRoom(roomId: string, title?: string): Promise<{ room_id: string }> {
    return this.call("POST", "rooms", { room_id: roomId, ...(title ? { title } : {}) });
  }

  getRoom(roomId: string): Promise<RoomInfo> {
    return this.call("GET", `rooms/${enc(roomId)}`);
  }

  promoteRoom(roomId: string, memberUserIds?: string[]): Promise<{ conversation_id: string }> {
    return this.call("POST", `rooms/${enc(roomId)}/promote`, memberUserIds ? { member_user_ids: memberUserIds } : {});
  }

  moderationRecall(conversationId: string, conversationSeq: number): Promise<EventSeqAnswer> {
    return this.call("POST", "moderation/recall", { conversation_id: conversationId, conversation_seq: conversationSeq });
  }

  listTypes(sinceVersion?: number): Promise<CustomMessageType[]> {
    return this.call("GET", "registry/types" + (sinceVersion === undefined ? "" : `?since_version=${sinceVersion}`));
  }

  getType(customType: string): Promise<CustomMessageType> {
    return this.call("GET", `registry/types/${enc(customType)}`);
  }

  createType(fields: TypeFields): Promise<CustomMessageType> {
    return this.call("POST", "registry/types", fields);
  }

  updateType(customType: string, fields: Partial<TypeFields>): Promise<CustomMessageType> {
    return this.call("PATCH", `registry/types/${enc(customType)}`, fields);
  }

  /** DELETE disables the type; old messages keep rendering. */
  disableType(customType: string): Promise<CustomMessageType> {
    return this.call("DELETE", `registry/types/${enc(customType)}`);
  }

  iceServers(): Promise<IceServers> {
    return this.call("GET", "rtc/ice-servers");
  }

  health(): Promise<{ status: string; node_id: string }> {
    return this.call("GET", "health");
  }
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function safeParse(text: string): unknown {
  try {
    return parseJson(text);
  } catch {
    return { code: "bad_response", message: text.slice(0, 200) };
  }
}
