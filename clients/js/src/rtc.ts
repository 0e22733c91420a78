/**
 * RTC signalling (protocol §12): RTC_SIGNAL requests and pushes, and each call's state as this
 * device sees it (ringing, accepted, then its outcome). Media never passes through QIM.
 */
import type { QimConnection } from "./connection.js";
import { Emitter } from "./emitter.js";
import { newClientMsgId } from "./ids.js";
import { type RetryOptions, withRateLimitRetry } from "./retry.js";
import type { CallState, Frame, Json, RtcAction, RtcSignalAck, RtcSignalPush } from "./types.js";

export interface Call {
  call_id: string;
  conversation_id: string;
  /** The other party's user id. */
  peer_user_id: string;
  role: "caller" | "callee";
  state: CallState;
  ring_deadline_ms?: number;
}

export interface RtcEvents {
  [name: string]: unknown;
  /** Every RTC_SIGNAL push, with the call it belongs to (after its state was updated). */
  signal: { signal: RtcSignalPush; call: Call };
  /** A call's state changed (an ACK or a push moved it). */
  state: Call;
}

const ENDED: ReadonlySet<CallState> = new Set(["completed", "missed", "rejected", "cancelled", "busy"]);

export function isEnded(state: CallState): boolean {
  return ENDED.has(state);
}

export class Calls extends Emitter<RtcEvents> {
  readonly calls = new Map<string, Call>();

  constructor(private readonly connection: QimConnection) {
    super();
    connection.on("push", (frame: Frame) => {
      if (frame.type === "RTC_SIGNAL") this.acceptPush(frame as RtcSignalPush);
    });
  }

  /** Rings `targetUserId`; the caller chooses the call_id (unique for good per tenant). */
  async invite(
    conversationId: string,
    targetUserId: string,
    signalPayload: Json = { media: "audio" },
    options: RetryOptions & { callId?: string } = {},
  ): Promise<Call> {
    const callId = options.callId ?? newClientMsgId();
    const call: Call = { call_id: callId, conversation_id: conversationId, peer_user_id: targetUserId, role: "caller", state: "ringing" };
    const ack = await withRateLimitRetry(
      () => this.request(call, "invite", signalPayload),
      options,
    );
    call.ring_deadline_ms = ack.ring_deadline_ms;
    this.calls.set(callId, call);
    this.setState(call, ack.state);
    return call;
  }

  ringing(callId: string): Promise<RtcSignalAck> {
    return this.signal(callId, "ringing");
  }
  accept(callId: string, signalPayload: Json = {}): Promise<RtcSignalAck> {
    return this.signal(callId, "accept", signalPayload);
  }
  reject(callId: string, signalPayload: Json = {}): Promise<RtcSignalAck> {
    return this.signal(callId, "reject", signalPayload);
  }
  cancel(callId: string): Promise<RtcSignalAck> {
    return this.signal(callId, "cancel");
  }
  hangup(callId: string, signalPayload: Json = {}): Promise<RtcSignalAck> {
    return this.signal(callId, "hangup", signalPayload);
  }
  /** An RTCSessionDescriptionInit, as `{sdp: {type, sdp}}`. */
  sdp(callId: string, description: Json): Promise<RtcSignalAck> {
    return this.signal(callId, "sdp", { sdp: description });
  }
  /** An RTCIceCandidateInit, or null to end trickling. */
  candidate(callId: string, candidate: Json): Promise<RtcSignalAck> {
    return this.signal(callId, "candidate", { candidate });
  }

  /** Any action on a known call, addressed to its other party; the ACK's state is kept. */
  async signal(callId: string, action: RtcAction, signalPayload: Json = {}): Promise<RtcSignalAck> {
    const call = this.calls.get(callId);
    if (call === undefined) throw new Error(`unknown call ${callId}`);
    const ack = await this.request(call, action, signalPayload);
    this.setState(call, ack.state);
    return ack;
  }

  private request(call: Call, action: RtcAction, signalPayload: Json): Promise<RtcSignalAck> {
    return this.connection.request<RtcSignalAck>("RTC_SIGNAL", {
      conversation_id: call.conversation_id,
      target_user_id: call.peer_user_id,
      call_id: call.call_id,
      action,
      signal_payload: signalPayload,
    });
  }

  private acceptPush(push: RtcSignalPush): void {
    let call = this.calls.get(push.call_id);
    if (call === undefined) {
      call = {
        call_id: push.call_id,
        conversation_id: push.conversation_id,
        peer_user_id: push.from_user_id,
        role: "callee",
        state: "ringing",
        ring_deadline_ms: push.ring_deadline_ms,
      };
      this.calls.set(push.call_id, call);
    }
    const next = stateAfter(call, push.action);
    if (next !== undefined) this.setState(call, next);
    this.emit("signal", { signal: push, call });
  }

  private setState(call: Call, state: CallState): void {
    if (call.state === state || isEnded(call.state)) return;
    call.state = state;
    this.emit("state", call);
  }
}

/** The state a pushed action moves a call to, as the receiving side sees it (§12 table). */
function stateAfter(call: Call, action: string): CallState | undefined {
  switch (action) {
    case "accept":
      return "accepted";
    case "reject":
      return "rejected";
    case "cancel":
      return "cancelled";
    case "busy":
      return "busy";
    case "timeout":
      return "missed";
    case "hangup":
      if (call.state === "accepted") return "completed";
      return call.role === "caller" ? "rejected" : "cancelled";
    default:
      return undefined; // invite, ringing, sdp, candidate: no change
  }
}
