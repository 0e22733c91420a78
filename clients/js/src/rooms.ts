/**
 * Rooms (protocol §11): join, live ROOM_BATCH pushes, replay from the last `room_seq` after a
 * reconnect, epochs, and `replay_truncated` surfaced with its reason. Positions are `bigint`
 * end to end. Each room's events come out once each, ascending by `room_seq`.
 */
import { toRoomSeq } from "./codec.js";
import type { QimConnection, SentRequest } from "./connection.js";
import { Emitter } from "./emitter.js";
import { newClientMsgId } from "./ids.js";
import { type RetryOptions, withRateLimitRetry } from "./retry.js";
import type { Frame, Json, ReplayTruncatedReason, RoomBatch, RoomEvent, RoomSendAck } from "./types.js";

export interface RoomState {
  room_id: string;
  room_epoch: number;
  /** The newest `room_seq` handed on (or jumped to); null before the first batch. */
  last_room_seq: bigint | null;
}

export interface RoomEvents {
  [name: string]: unknown;
  event: { room_id: string; event: RoomEvent };
  /** The replay could not cover the gap: events were lost; the stream jumped to the head. */
  truncated: {
    room_id: string;
    reason: ReplayTruncatedReason;
    room_epoch: number;
    latest_room_seq: bigint;
    earliest_replay_room_seq: bigint | null;
  };
  /** The room's writer restarted: a new epoch, the old epoch's events are gone. */
  epoch: { room_id: string; room_epoch: number; previous_epoch: number };
}

export class Rooms extends Emitter<RoomEvents> {
  readonly joined = new Map<string, RoomState>();

  constructor(
    private readonly connection: QimConnection,
    private readonly prepare: (event: RoomEvent) => void = () => undefined,
  ) {
    super();
    // Replies and pushes alike, in arrival order: a join's replay precedes later live batches.
    connection.on("inbound", (frame: Frame) => {
      if (frame.type === "ROOM_BATCH") this.accept(frame as RoomBatch);
    });
    connection.addReconnectHook((sent) => this.rejoinAll(sent), () => this.rejoinFrames());
    connection.on("connected", ({ reconnect }) => {
      // connect() again after close(): back into the rooms it was in.
      if (!reconnect && this.joined.size > 0) void this.rejoinAll().catch((error) => connection.emit("error", error));
    });
  }

  /**
   * ROOM_JOIN; with `afterRoomSeq` replays what followed it (exclusive), following `has_more`.
   * Without it the stream starts at the room's head.
   */
  async join(roomId: string, afterRoomSeq?: bigint | number | string): Promise<RoomBatch> {
    const after = afterRoomSeq === undefined ? null : toRoomSeq(afterRoomSeq);
    const known = this.joined.get(roomId);
    this.joined.set(roomId, known ?? { room_id: roomId, room_epoch: 0, last_room_seq: after });
    try {
      return await this.joinAt(roomId, after);
    } catch (error) {
      if (known === undefined) this.joined.delete(roomId);
      throw error;
    }
  }

  async leave(roomId: string): Promise<void> {
    this.joined.delete(roomId);
    await this.connection.request("ROOM_LEAVE", { room_id: roomId });
  }

  /** ROOM_SEND; waits out `rate_limited` (room_msg_rate); the same `client_msg_id` on retry. */
  send(roomId: string, contentType: string, payload: Json, options: RetryOptions & { clientMsgId?: string } = {}): Promise<RoomSendAck> {
    const frame = { room_id: roomId, client_msg_id: options.clientMsgId ?? newClientMsgId(), content_type: contentType, payload };
    return withRateLimitRetry(() => this.connection.request<RoomSendAck>("ROOM_SEND", frame), options);
  }

  sendText(roomId: string, text: string, options: RetryOptions = {}): Promise<RoomSendAck> {
    return this.send(roomId, "text", { text }, options);
  }

  /**
   * After a reconnect: back into every room at once, replaying from each one's last position.
   * `sent` holds the ROOM_JOINs the reconnect already wrote behind AUTH (`rejoinFrames`): their
   * replies stand for those rooms' joins. Every room is tried; the first failure is thrown.
   */
  async rejoinAll(sent: SentRequest[] = []): Promise<void> {
    const written = new Map(sent.map(({ frame, reply }) => [String(frame.room_id), reply as Promise<RoomBatch>]));
    const rooms = [...this.joined.values()];
    const results = await Promise.allSettled(
      rooms.map((state) => this.joinAt(state.room_id, state.last_room_seq, written.get(state.room_id))),
    );
    const failed = results.find((result): result is PromiseRejectedResult => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  /** The ROOM_JOIN of every room, from its last position: a reconnect writes them behind AUTH. */
  rejoinFrames(): Frame[] {
    return [...this.joined.values()].map((state) => ({ type: "ROOM_JOIN", ...joinFields(state.room_id, state.last_room_seq) }));
  }

  private async joinAt(roomId: string, after: bigint | null, written?: Promise<RoomBatch>): Promise<RoomBatch> {
    const reply = await (written ?? this.connection.request<RoomBatch>("ROOM_JOIN", joinFields(roomId, after)));
    let page = reply;
    while (page.has_more && page.events.length > 0) {
      const last = page.events[page.events.length - 1].room_seq;
      page = await this.connection.request<RoomBatch>("ROOM_REPLAY", { room_id: roomId, after_room_seq: last });
    }
    return reply;
  }

  /** Applies one ROOM_BATCH (reply or push): epoch, truncation, then the new events. */
  accept(batch: RoomBatch): void {
    const state = this.joined.get(batch.room_id);
    if (state === undefined) return;
    if (state.room_epoch !== 0 && batch.room_epoch > state.room_epoch) {
      this.emit("epoch", { room_id: batch.room_id, room_epoch: batch.room_epoch, previous_epoch: state.room_epoch });
    }
    state.room_epoch = Math.max(state.room_epoch, batch.room_epoch);
    if (batch.replay_truncated) {
      this.emit("truncated", {
        room_id: batch.room_id,
        reason: batch.replay_truncated_reason ?? "evicted",
        room_epoch: batch.room_epoch,
        latest_room_seq: batch.latest_room_seq,
        earliest_replay_room_seq: batch.earliest_replay_room_seq,
      });
      if (batch.events.length === 0) {
        state.last_room_seq = batch.latest_room_seq; // jump to the head (§11), even backwards for `ahead`
        return;
      }
      state.last_room_seq = null; // the events given start past the gap: take them all
    }
    if (batch.req_id !== undefined && batch.events.length === 0 && state.last_room_seq === null) {
      state.last_room_seq = batch.latest_room_seq; // a plain join: live from the head
      return;
    }
    for (const event of batch.events) {
      if (state.last_room_seq !== null && event.room_seq <= state.last_room_seq) continue;
      state.last_room_seq = event.room_seq;
      this.prepare(event);
      this.emit("event", { room_id: batch.room_id, event });
    }
  }
}

function joinFields(roomId: string, after: bigint | null): Record<string, unknown> {
  const fields: Record<string, unknown> = { room_id: roomId };
  if (after !== null) fields.after_room_seq = after;
  return fields;
}
