/** Typed frames of the QIM wire contract (protocol.md §3-§12). Unknown fields may appear. */

export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json };

/** Any frame: a `type` plus fields. Specific frames below narrow it. */
export interface Frame {
  type: string;
  req_id?: string;
  [field: string]: unknown;
}

export type ErrorCode =
  | "bad_frame" | "unknown_type" | "unauthenticated" | "forbidden" | "not_found"
  | "rate_limited" | "too_large" | "window_expired" | "unknown_custom_type" | "room_limit"
  | "conflict" | "internal" | "bad_request";

export interface ErrorFrame extends Frame {
  type: "ERROR";
  code: ErrorCode | string;
  message: string;
  retry_after_ms?: number;
}

/** The server's tunables by lower-case name (§3), e.g. `per_user_msg_rate`. */
export interface Limits {
  room_log_retention_minutes: number;
  room_ring_max_items: number;
  room_msg_rate: number;
  room_outbound_frame_rate: number;
  max_rooms_per_connection: number;
  read_sync_merge_window_s: number;
  recall_self_window_s: number;
  edit_self_window_s: number;
  max_custom_payload_bytes: number;
  per_user_msg_rate: number;
  per_user_reaction_rate: number;
  rtc_ring_timeout_s: number;
  max_outbound_frame_bytes?: number;
  rtc_disconnect_grace_s?: number;
  /** The inbound frame budget (protocol §3): past it, ERROR rate_limited; a flood closes 4430. */
  inbound_frame_rate?: number;
  inbound_frame_burst?: number;
  max_inbound_frame_depth?: number;
  [name: string]: number | undefined;
}

export interface AuthOk extends Frame {
  type: "AUTH_OK";
  user_id: string;
  tenant: string;
  device_id: string;
  connection_id: string;
  node_id: string;
  server_time_ms: number;
  registry_version: number;
  /** When this session's token expires (null unless the server sets QIM_TOKEN_TTL_S). */
  token_expires_at_ms?: number | null;
  limits: Limits;
}

export type MessageState = "normal" | "edited" | "recalled" | "deleted";

/** A member's role in a group (protocol §17.1); in a direct conversation always `member`. */
export type GroupRole = "owner" | "admin" | "member";
/** A member's mailbox tier (§17.4): `mention_only` writes entries only for mentions. */
export type MailboxTier = "full" | "mention_only";
/** Who may @all (`mention_all_policy`) or add members (`add_members_policy`). */
export type GroupPolicy = "admins" | "members";

/** The message a reply quotes, as it is now (§17.3); a target retention deleted has no sender or type. */
export interface ReplyQuote {
  conversation_seq: number;
  sender_id: string | null;
  content_type: string | null;
  preview: string;
  state: MessageState;
}

export interface Reactions {
  counts: Record<string, number>;
  summary_version: number;
}

export interface Message {
  conversation_id: string;
  conversation_seq: number;
  message_id: string;
  sender_id: string;
  sender_device_id: string;
  content_type: string;
  payload: Json;
  preview: string;
  sent_at_ms: number;
  state: MessageState;
  edited_at_ms?: number;
  reactions?: Reactions;
  recallable_until_ms?: number;
  editable_until_ms?: number;
  target_conversation_seq?: number;
  /** User ids this message mentions (§17.2); on every message, absent on membership and group rows. */
  mentions?: string[];
  /** An @all: it mentions every member. */
  mention_all?: boolean;
  /** Present on replies only. */
  reply_to?: ReplyQuote;
  /** Added by the SDK: how to show it, from the registry (see registry.ts). */
  render?: RenderDecision;
}

export type ControlType = "qim.read.v1" | "qim.recall.v1" | "qim.edit.v1" | "qim.membership.v1" | "qim.group.v1";

/** The payload of a `qim.group.v1` event (§17.1): roles changed, or the title or policies. */
export type GroupEventPayload =
  | { action: "role"; roles: Record<string, GroupRole> }
  | { action: "update"; changes: { title?: string; mention_all_policy?: GroupPolicy; add_members_policy?: GroupPolicy } };

export interface ControlEvent {
  custom_type: ControlType | string;
  conversation_seq?: number;
  target_conversation_seq?: number;
  read_conversation_seq?: number;
  actor_id: string;
  origin_device_id: string | null;
  payload?: Json;
  /** On an edit that replaced the target's mentions (§17.2): the new set. */
  mentions?: string[];
  mention_all?: boolean;
}

export interface MailboxEvent {
  mailbox_seq: number;
  kind: "message" | "control";
  conversation_id: string;
  message?: Message;
  control?: ControlEvent;
}

/**
 * A live EVENT (§6.5): a row that wrote no entry in your mailbox (you are `mention_only` in
 * that conversation and it does not mention you). It has no `mailbox_seq`, so it never moves
 * the sync cursor, and SYNC never returns it.
 */
export interface LiveEvent {
  live: true;
  kind: "message" | "control";
  conversation_id: string;
  message?: Message;
  control?: ControlEvent;
}

export interface SendAck extends Frame {
  type: "ACK";
  message_id: string;
  conversation_seq?: number;
  sent_at_ms: number;
}

export interface EventAck extends Frame {
  type: "ACK";
  event_conversation_seq: number;
}

export interface MarkReadAck extends Frame {
  type: "ACK";
  read_conversation_seq: number;
  unread: number;
}

export interface SyncBatch extends Frame {
  type: "SYNC_BATCH";
  events: MailboxEvent[];
  next_mailbox_seq: number;
  has_more: boolean;
  /** Present (true) when the server's retention deleted entries after the cursor (protocol §6.2). */
  history_truncated?: boolean;
}

export interface HistoryBatch extends Frame {
  type: "HISTORY_BATCH";
  conversation_id: string;
  messages: Message[];
  has_more?: boolean;
  /** Present (true) when the page reaches rows the server's retention deleted (protocol §6.3). */
  history_truncated?: boolean;
}

export interface ConversationItem {
  conversation_id: string;
  kind: "group" | "direct";
  title: string;
  last_seq: number;
  last_activity_ms: number;
  preview: string;
  unread: number;
  member?: boolean;
  /** Yours in this conversation (§17). */
  role: GroupRole;
  tier: MailboxTier;
  /** Your unread mentions, @all included; MARK_READ past them clears them. */
  mention_count: number;
}

export interface ConversationList extends Frame {
  type: "CONVERSATION_LIST";
  items: ConversationItem[];
  badge: number;
  has_more?: boolean;
  next_before?: { last_activity_ms: number; conversation_id: string };
}

export interface ReactAck extends Frame {
  type: "ACK";
  counts: Record<string, number>;
  summary_version: number;
}

export interface ReactionUpdate extends Frame {
  type: "REACTION_UPDATE";
  conversation_id: string;
  conversation_seq: number;
  counts: Record<string, number>;
  summary_version: number;
  pushed_at_ms?: number;
}

export interface TypingPush extends Frame {
  type: "TYPING";
  conversation_id: string;
  user_id: string;
  state: "start" | "stop";
}

export interface PresencePush extends Frame {
  type: "PRESENCE";
  user_id: string;
  online: boolean;
}

export interface EphemeralPush extends Frame {
  type: "EPHEMERAL";
  conversation_id: string;
  sender_id: string;
  sender_device_id: string;
  content_type: string;
  payload: Json;
  sent_at_ms: number;
}

export type DeliveryClass = "persistent" | "ephemeral" | "ephemeral_aggregate";

export interface CustomMessageType {
  custom_type: string;
  schema_version: number;
  delivery_class: DeliveryClass;
  counts_unread: boolean;
  affects_session_order: boolean;
  timeline_visible: boolean;
  anchor_mode: "own_seq" | "anchor_target" | "none";
  preview_template: string;
  max_payload_bytes: number;
  minimum_client_version: string;
  enabled: boolean;
  version?: number;
}

export interface RegistryFrame extends Frame {
  type: "REGISTRY";
  registry_version: number;
  types: CustomMessageType[];
}

/** How the SDK suggests showing a message or room event (registry.ts). */
export interface RenderDecision {
  /** "text", "custom" (a known enabled or disabled type) or "placeholder" (unknown type). */
  kind: "text" | "custom" | "placeholder";
  /** The registry row, when the type is known. */
  type?: CustomMessageType;
  /** What to show when the app has no renderer of its own: the server's preview. */
  fallback_text: string;
}

export interface RoomEvent {
  room_seq: bigint;
  message_id: string;
  sender_id: string;
  content_type: string;
  payload: Json;
  sent_at_ms: number;
  render?: RenderDecision;
}

export type ReplayTruncatedReason = "epoch_changed" | "evicted" | "ahead";

export interface RoomBatch extends Frame {
  type: "ROOM_BATCH";
  room_id: string;
  room_epoch: number;
  events: RoomEvent[];
  latest_room_seq: bigint;
  earliest_replay_room_seq: bigint | null;
  replay_truncated: boolean;
  replay_truncated_reason?: ReplayTruncatedReason;
  has_more?: boolean;
}

export interface RoomSendAck extends Frame {
  type: "ACK";
  message_id: string;
  room_seq: bigint;
}

export type RtcAction =
  | "invite" | "ringing" | "accept" | "reject" | "cancel" | "hangup" | "sdp" | "candidate";
export type RtcServerAction = "busy" | "timeout";
export type CallOutcome = "completed" | "missed" | "rejected" | "cancelled" | "busy";
export type CallState = "ringing" | "accepted" | CallOutcome;

export interface RtcSignalAck extends Frame {
  type: "ACK";
  call_id: string;
  state: CallState;
  delivered_connections: number;
  pushed: boolean;
  ring_deadline_ms?: number;
}

export interface RtcSignalPush extends Frame {
  type: "RTC_SIGNAL";
  conversation_id: string;
  from_user_id: string;
  from_device_id: string | null;
  call_id: string;
  action: RtcAction | RtcServerAction;
  signal_payload: Json;
  ring_deadline_ms?: number;
}

export interface RegistryUpdated extends Frame {
  type: "REGISTRY_UPDATED";
  registry_version: number;
}

export interface PongFrame extends Frame {
  type: "PONG";
  server_time_ms: number;
}
