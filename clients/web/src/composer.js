/** The composer of an open conversation: the text field with its @ autocomplete, the quote
 * bar while replying, typing notices, and the SEND with its `mentions`, `mention_all` and
 * `reply_to` (protocol §17.2, §17.3). */
import { h } from "./dom.js";
import { MentionPicker, mentionedIn, mentionsAll } from "./mentions.js";

const TYPING_EVERY_MS = 3000;

export class Composer {
  /** `group` answers the members and whether @all is allowed; `sent(ack)` runs after each SEND. */
  constructor(client, conversationId, group, sent) {
    Object.assign(this, { client, conversationId, group, sent });
    this.replyingTo = null;
    this.input = h("input", { name: "text", id: "composer-text", placeholder: "Message", autocomplete: "off", required: true,
      "aria-label": "Message" });
    this.picker = new MentionPicker(this.input, {
      members: () => this.group.others(), mayMentionAll: () => this.group.mayMentionAll,
    });
    this.replyBar = h("div", { id: "reply-bar", class: "reply-bar", role: "status", hidden: true });
    this.error = h("p", { id: "composer-error", class: "error composer-error", role: "alert" });
    let typingSent = 0;
    this.input.addEventListener("input", () => {
      this.error.textContent = "";
      if (Date.now() - typingSent < TYPING_EVERY_MS) return;
      typingSent = Date.now();
      this.client.messages.typing(conversationId, "start").catch(() => {});
    });
    this.input.addEventListener("keydown", (key) => {
      if (key.key === "Escape" && !key.defaultPrevented && this.replyingTo) this.cancelReply();
    });
    const form = h("form", { id: "composer", class: "composer" }, this.input, h("button", { type: "submit" }, "Send"));
    form.addEventListener("submit", (submit) => {
      submit.preventDefault();
      this.send();
    });
    this.element = h("div", { class: "composer-area" }, this.picker.list, this.replyBar, this.error, form);
  }

  /** Shows the quote bar: the next SEND replies to `message`. */
  replyTo(message) {
    this.replyingTo = message;
    this.replyBar.replaceChildren(
      h("div", { class: "quote" }, h("span", { class: "quote-sender" }, `Replying to ${message.sender_id}`),
        h("span", { class: "quote-text" }, message.preview || "[message]")),
      h("button", { type: "button", class: "cancel-reply", "aria-label": "Cancel reply", onclick: () => this.cancelReply() }, "×"));
    this.replyBar.hidden = false;
    this.input.focus();
  }

  cancelReply() {
    this.replyingTo = null;
    this.replyBar.hidden = true;
    this.replyBar.replaceChildren();
  }

  /** The SEND: every member the text names as `@user_id` is mentioned; `@all` where allowed. */
  async send() {
    const text = this.input.value;
    if (!text) return;
    const options = addressing(text, this.group);
    if (this.replyingTo) options.replyTo = this.replyingTo.conversation_seq;
    this.input.value = "";
    let ack;
    try {
      ack = await this.client.messages.sendText(this.conversationId, text, options);
    } catch (failure) {
      this.input.value = text; // not sent: keep the text to fix and send again
      this.error.textContent = failure.message || "not sent";
      return;
    }
    this.cancelReply();
    await this.sent(ack);
  }
}

/**
 * Whom `text` mentions, as SEND or EDIT options: every member it names as `@user_id`, and
 * `@all` where the group allows me. For an EDIT of `edited`, the set always goes (it replaces
 * the message's, §17.2), and an @all the message already had may be kept or dropped.
 */
export function addressing(text, group, edited = null) {
  const options = {};
  const mentions = mentionedIn(text, group.others().map((member) => member.user_id));
  if (mentions.length || edited) options.mentions = mentions;
  const everyone = mentionsAll(text);
  if (edited && (group.mayMentionAll || edited.mention_all)) options.mentionAll = everyone;
  else if (everyone && group.mayMentionAll) options.mentionAll = true;
  return options;
}
