/** Rooms in the web client: join by id, live events, and a visible "you missed messages"
 * marker where a replay after a reconnect could not cover the gap (replay_truncated). */
import { clock, h } from "./dom.js";

const REASONS = { epoch_changed: "the room restarted", evicted: "too far behind", ahead: "out of step" };

export class RoomsPanel {
  constructor(client, rest, showPane) {
    Object.assign(this, { client, rest, showPane });
    this.logs = new Map(); // room id -> [{event} | {truncated}]
    this.openId = null;
    this.list = h("ul", { id: "room-list", class: "conversation-list" });
    client.rooms.on("event", ({ room_id, event }) => this.add(room_id, { event }));
    client.rooms.on("truncated", (info) => this.add(info.room_id, { truncated: info }));
  }

  form() {
    const input = h("input", { name: "room", placeholder: "Room id", required: true });
    const error = h("span", { class: "error", id: "room-error" });
    const form = h("form", { id: "join-room", class: "new-group" }, input, h("button", { type: "submit" }, "Join room"), error);
    form.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      error.textContent = "";
      try {
        await this.join(input.value.trim());
        form.reset();
      } catch (failure) {
        error.textContent = failure.message || "could not join";
      }
    });
    return form;
  }

  async join(roomId) {
    if (!this.logs.has(roomId)) {
      this.logs.set(roomId, []);
      await this.client.rooms.join(roomId);
      this.list.append(h("li", { class: "conversation-item room-item", "data-room": roomId, onclick: () => this.open(roomId) },
        h("div", { class: "title" }, `# ${roomId}`)));
    }
    this.open(roomId);
  }

  add(roomId, item) {
    const log = this.logs.get(roomId);
    if (!log) return;
    log.push(item);
    if (this.openId === roomId) this.render();
  }

  open(roomId) {
    this.openId = roomId;
    this.timeline = h("ol", { id: "room-messages", class: "messages" });
    const input = h("input", { name: "text", id: "room-text", placeholder: "Message the room", autocomplete: "off", required: true });
    const composer = h("form", { id: "room-composer", class: "composer" }, input, h("button", { type: "submit" }, "Send"));
    composer.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      const text = input.value;
      input.value = "";
      await this.client.rooms.sendText(roomId, text);
    });
    this.showPane(`# ${roomId}`, this.timeline, composer, () => { this.openId = null; });
    this.render();
  }

  render() {
    const own = this.client.userId;
    this.timeline.replaceChildren(...this.logs.get(this.openId).map(({ event, truncated }) => truncated
      ? h("li", { class: "truncated", role: "status" }, `You missed messages (${REASONS[truncated.reason] || truncated.reason})`)
      : h("li", { class: `message${event.sender_id === own ? " own" : ""}`, "data-room-seq": String(event.room_seq) },
        h("div", { class: "meta" }, h("span", { class: "sender" }, event.sender_id), " ", clock(event.sent_at_ms)),
        h("div", { class: "text" }, event.payload?.text ?? event.render?.fallback_text ?? "[message]"))));
    this.timeline.lastElementChild?.scrollIntoView({ block: "end" });
  }
}
