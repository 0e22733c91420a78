/**
 * Conversation requests (protocol §6, §8, §10, §17): SEND with a `client_msg_id` (so a retry,
 * after `rate_limited` or a lost connection, can never post twice) and optional mentions and
 * reply, EDIT, RECALL, HISTORY paging, CONVERSATIONS paging, MARK_READ, TYPING and REACT.
 */
import type { QimConnection } from "./connection.js";
import { ConnectionLost } from "./errors.js";
import { newClientMsgId } from "./ids.js";
import { type RetryOptions, withRateLimitRetry } from "./retry.js";
import type {
  ConversationList, EventAck, HistoryBatch, Json, MarkReadAck, Message, ReactAck, SendAck,
} from "./types.js";

/** Who a message mentions (§17.2). The server never reads the text: these lists are what notify. */
export interface MentionOptions {
  /** User ids, each a current member (else `bad_request`); at most `max_mentions_per_message`. */
  mentions?: string[];
  /** @all; `forbidden` unless your role or the group's `mention_all_policy` allows it. */
  mentionAll?: boolean;
}

export interface SendOptions extends RetryOptions, MentionOptions {
  clientMsgId?: string;
  /** Required by `anchor_target` types (a vote on a poll), refused on others. */
  targetConversationSeq?: number;
  /** The `conversation_seq` this message replies to (§17.3); `not_found` if you cannot see it. */
  replyTo?: number;
  /** Reconnects to wait through, resending the same `client_msg_id` (default 3). */
  maxConnectionRetries?: number;
}

export interface HistoryQuery {
  beforeSeq?: number;
  afterSeq?: number;
  limit?: number;
}

export class Messaging {
  constructor(
    private readonly connection: QimConnection,
    private readonly prepare: (message: Message) => void = () => undefined,
  ) {}

  /** SEND; answers the ACK (`conversation_seq` absent for ephemeral types). */
  async send(conversationId: string, contentType: string, payload: Json, options: SendOptions = {}): Promise<SendAck> {
    const frame: Record<string, unknown> = {
      conversation_id: conversationId,
      client_msg_id: options.clientMsgId ?? newClientMsgId(),
      content_type: contentType,
      payload,
    };
    if (options.targetConversationSeq !== undefined) frame.target_conversation_seq = options.targetConversationSeq;
    if (options.replyTo !== undefined) frame.reply_to = options.replyTo;
    Object.assign(frame, mentionFields(options));
    const connectionRetries = options.maxConnectionRetries ?? 3;
    for (let lost = 0; ; lost++) {
      try {
        return await withRateLimitRetry(() => this.connection.request<SendAck>("SEND", frame), options);
      } catch (error) {
        // Idempotent per client_msg_id: after a reconnect the same frame gets the first ACK.
        if (!(error instanceof ConnectionLost) || lost >= connectionRetries || this.connection.isClosed) throw error;
        await this.connection.waitConnected();
      }
    }
  }

  sendText(conversationId: string, text: string, options: SendOptions = {}): Promise<SendAck> {
    return this.send(conversationId, "text", { text }, options);
  }

  /** EDIT; `mentions` / `mentionAll`, when given, replace the message's (left out: kept). */
  edit(conversationId: string, conversationSeq: number, payload: Json, options: MentionOptions = {}): Promise<EventAck> {
    return this.connection.request<EventAck>("EDIT", {
      conversation_id: conversationId,
      conversation_seq: conversationSeq,
      payload,
      ...mentionFields(options),
    });
  }

  recall(conversationId: string, conversationSeq: number): Promise<EventAck> {
    return this.connection.request<EventAck>("RECALL", { conversation_id: conversationId, conversation_seq: conversationSeq });
  }

  /** One HISTORY page, ascending; `has_more` says more exist in the paging direction. */
  async history(conversationId: string, query: HistoryQuery = {}): Promise<HistoryBatch> {
    const fields: Record<string, unknown> = { conversation_id: conversationId };
    if (query.beforeSeq !== undefined) fields.before_seq = query.beforeSeq;
    if (query.afterSeq !== undefined) fields.after_seq = query.afterSeq;
    if (query.limit !== undefined) fields.limit = query.limit;
    const batch = await this.connection.request<HistoryBatch>("HISTORY", fields);
    batch.messages.forEach(this.prepare);
    return batch;
  }

  /** Pages backwards from the newest (or `beforeSeq`), newest page first, until the start. */
  async *historyPages(conversationId: string, query: Omit<HistoryQuery, "afterSeq"> = {}): AsyncGenerator<Message[]> {
    let beforeSeq = query.beforeSeq;
    for (;;) {
      const batch = await this.history(conversationId, { beforeSeq, limit: query.limit });
      if (batch.messages.length > 0) yield batch.messages;
      if (!batch.has_more || batch.messages.length === 0) return;
      beforeSeq = batch.messages[0].conversation_seq;
    }
  }

  /** The whole conversation list: CONVERSATIONS pages followed by `next_before`, merged. */
  async conversations(pageLimit?: number): Promise<ConversationList> {
    const fields: Record<string, unknown> = pageLimit === undefined ? {} : { limit: pageLimit };
    const first = await this.connection.request<ConversationList>("CONVERSATIONS", fields);
    let page = first;
    while (page.has_more && page.next_before) {
      page = await this.connection.request<ConversationList>("CONVERSATIONS", { ...fields, before: page.next_before });
      first.items.push(...page.items);
      first.badge = page.badge;
    }
    first.has_more = false;
    delete first.next_before;
    return first;
  }

  markRead(conversationId: string, readConversationSeq: number): Promise<MarkReadAck> {
    return this.connection.request<MarkReadAck>("MARK_READ", {
      conversation_id: conversationId,
      read_conversation_seq: readConversationSeq,
    });
  }

  /** TYPING start/stop; with a req_id so errors (forbidden, not_found) come back. */
  async typing(conversationId: string, state: "start" | "stop"): Promise<void> {
    await this.connection.request("TYPING", { conversation_id: conversationId, state });
  }

  /** REACT add/remove; waits out `rate_limited` (per_user_reaction_rate). */
  react(
    conversationId: string,
    conversationSeq: number,
    reactionKey: string,
    action: "add" | "remove" = "add",
    options: RetryOptions = {},
  ): Promise<ReactAck> {
    const frame = { conversation_id: conversationId, conversation_seq: conversationSeq, reaction_key: reactionKey, action };
    return withRateLimitRetry(() => this.connection.request<ReactAck>("REACT", frame), options);
  }
}

/** The wire fields of MentionOptions: only those given, so an EDIT without them keeps the message's. */
function mentionFields(options: MentionOptions): { mentions?: string[]; mention_all?: boolean } {
  const fields: { mentions?: string[]; mention_all?: boolean } = {};
  if (options.mentions !== undefined) fields.mentions = options.mentions;
  if (options.mentionAll !== undefined) fields.mention_all = options.mentionAll;
  return fields;
}
