/** The call panel: ring another member of the open conversation, answer or decline an
 * incoming call, cancel or hang up; the ring deadline shown, the outcome kept on screen. The
 * signalling only (QIM relays no media): a real app would attach WebRTC to accept/sdp. */
import { isEnded } from "../../js/src/index.ts";
import { clock, h } from "./dom.js";

const OUTCOMES = { completed: "ended", missed: "missed (no answer)", rejected: "declined", cancelled: "cancelled", busy: "busy" };

export class CallPanel {
  constructor(client) {
    this.client = client;
    this.element = h("div", { id: "call-panel", class: "call-panel", hidden: true });
    client.calls.on("state", (call) => this.render(call));
    client.calls.on("signal", ({ call }) => this.render(call));
  }

  async invite(conversationId, userId) {
    const call = await this.client.calls.invite(conversationId, userId, { media: "audio" });
    this.render(call);
  }

  render(call) {
    const { calls } = this.client;
    const act = (label, action, cls) => h("button", { class: cls, onclick: () => calls.signal(call.call_id, action).catch(() => {}) }, label);
    let line;
    const buttons = [];
    if (isEnded(call.state)) {
      line = `Call with ${call.peer_user_id} ${OUTCOMES[call.state] || call.state}`;
      buttons.push(h("button", { class: "dismiss", onclick: () => { this.element.hidden = true; } }, "Close"));
    } else if (call.state === "accepted") {
      line = `In a call with ${call.peer_user_id}`;
      buttons.push(act("Hang up", "hangup", "hangup"));
    } else if (call.role === "caller") {
      line = `Calling ${call.peer_user_id}…${call.ring_deadline_ms ? ` (rings until ${clock(call.ring_deadline_ms)})` : ""}`;
      buttons.push(act("Cancel", "cancel", "cancel"));
    } else {
      line = `${call.peer_user_id} is calling${call.ring_deadline_ms ? ` (until ${clock(call.ring_deadline_ms)})` : ""}`;
      buttons.push(act("Accept", "accept", "accept"), act("Decline", "reject", "decline"));
    }
    this.element.className = `call-panel ${call.state}`;
    this.element.dataset.state = call.state;
    this.element.replaceChildren(h("span", { class: "call-line" }, line), ...buttons);
    this.element.hidden = false;
  }
}
