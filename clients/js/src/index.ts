/** @qim/client: a TypeScript client for QIM (WebSocket /ws/v1 and REST /api/v1). */
export { Backoff, type BackoffOptions } from "./backoff.js";
export { QimClient, type ClientOptions } from "./client.js";
export {
  counterOf, decodeFrame, encodeFrame, epochOf, EPOCH_SHIFT, parseJson, ROOM_SEQ_FIELDS, stringifyJson, toRoomSeq,
} from "./codec.js";
export {
  CLOSE_AUTH_TIMEOUT, CLOSE_CREDENTIALS_REVOKED, CLOSE_FLOODING, CLOSE_TOO_SLOW, CLOSE_UNAUTHENTICATED,
  CLOSE_UNAVAILABLE, isFinalClose, QimConnection,
  type CloseInfo, type ConnectionEvents, type ConnectionOptions, type WebSocketConstructor, type WebSocketLike,
} from "./connection.js";
export { Emitter } from "./emitter.js";
export { AuthError, ConnectionLost, QimError, RequestTimeout, RestError } from "./errors.js";
export { newClientMsgId } from "./ids.js";
export { Messaging, type HistoryQuery, type MentionOptions, type SendOptions } from "./messaging.js";
export { Presence } from "./presence.js";
export { TypeRegistry, UNKNOWN_TYPE_TEXT } from "./registry.js";
export {
  REST_PATHS, RestClient, type ConversationIdAnswer, type ConversationInfo, type ConversationSeqAnswer,
  type EventSeqAnswer, type GroupChanges, type GroupMember, type GroupSettings, type GroupUpdateAnswer, type IceServer,
  type IceServers, type LoginAnswer, type MemberChangeAnswer, type MemberPage, type PushRegistration, type RoomInfo,
  type TypeFields, type UserIdAnswer, type WebPushSubscriptionJson,
} from "./rest.js";
export { withRateLimitRetry, type RetryOptions } from "./retry.js";
export { Rooms, type RoomState } from "./rooms.js";
export { Calls, isEnded, type Call } from "./rtc.js";
export { MailboxSync, MemoryCursorStore, StorageCursorStore, type CursorStore } from "./sync.js";
export * from "./types.js";
export { VERSION } from "./version.js";
