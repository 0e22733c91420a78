/** The chat screen: the conversation list (unread and mention badges, previews, newest first)
 * and one open conversation (history paging, send with mentions and replies, edit, recall,
 * reactions, typing, its members and my tier), kept live by the SDK's mailbox and live events
 * and pushes. */
import { clock, h } from "./dom.js";
import { CallPanel } from "./calls.js";
import { Composer, addressing } from "./composer.js";
import { Group } from "./group.js";
import { MemberPanel } from "./member_panel.js";
import { mentionsMe } from "./mentions.js";
import { GROUP, MEMBERSHIP, isShownRow, isSystemRow, messageText, quoteBlock, systemText } from "./message_view.js";
import { RoomsPanel } from "./rooms.js";
import { tierControl } from "./tier.js";

const REACTIONS = ["👍", "❤️", "😂"];
const TYPING_SHOWN_MS = 6000;

export class Chat {
  constructor(root, client, rest, session, logout, notifications) {
    Object.assign(this, { root, client, rest, session, logout, notifications });
    this.conversations = new Map();
    this.open = null; // {id, messages: Map(seq -> message), hasMore}
    this.mine = new Set(); // "seq:key" reactions this device added
    this.typingUntil = new Map();
    this.rooms = new RoomsPanel(client, rest, (...pane) => this.showPane(...pane));
    this.callPanel = new CallPanel(client);
    this.build();
  }

  build() {
    this.list = h("ul", { id: "conversation-list", class: "conversation-list" });
    this.status = h("span", { id: "connection", class: "status" }, "connecting");
    this.pane = h("section", { id: "conversation", class: "conversation empty" }, h("p", { class: "hint" }, "Pick a conversation"));
    const side = h("aside", { class: "sidebar" },
      h("header", {}, h("strong", { id: "me" }, `${this.session.userId} @ ${this.session.tenant}`), this.status,
        h("button", { id: "logout", onclick: () => this.logout() }, "Log out")),
      this.notifications?.element, this.groupForm(), this.list, this.rooms.form(), this.rooms.list);
    this.root.replaceChildren(this.callPanel.element, h("main", { class: "chat" }, side, this.pane));
  }

  groupForm() {
    const form = h("form", { id: "new-group", class: "new-group" },
      h("input", { name: "title", placeholder: "New group title", required: true }),
      h("input", { name: "members", placeholder: "members: bob, carol" }),
      h("button", { type: "submit" }, "Create"));
    form.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      const fields = Object.fromEntries(new FormData(form));
      const members = fields.members.split(",").map((m) => m.trim()).filter(Boolean);
      const { conversation_id } = await this.rest.createConversation("group", members, { title: fields.title });
      form.reset();
      await this.refreshList();
      await this.openConversation(conversation_id);
    });
    return form;
  }

  async start() {
    this.client.mailbox.on("event", (event) => this.onEvent(event));
    // Rows of conversations I follow for mentions only: no mailbox entry, shown if open (§6.5).
    this.client.mailbox.on("live", (event) => this.onEvent(event));
    this.client.onPush("REACTION_UPDATE", (push) => this.onReactions(push));
    this.client.onPush("TYPING", (push) => this.onTyping(push));
    this.client.registry.on("updated", () => { if (this.open) this.renderTimeline(); });
    this.client.presence.on("change", () => { if (this.open) this.renderTimeline(); });
    this.client.connection.on("connected", () => { this.status.textContent = "online"; this.refreshList(); });
    this.client.connection.on("disconnected", () => { this.status.textContent = "reconnecting"; });
    await this.client.connect();
  }

  async refreshList() {
    const answer = await this.client.messages.conversations();
    this.conversations = new Map(answer.items.map((item) => [item.conversation_id, item]));
    const items = answer.items.slice().sort((a, b) => b.last_activity_ms - a.last_activity_ms);
    this.list.replaceChildren(...items.map((item) => this.listItem(item)));
  }

  listItem(item) {
    const mentions = item.mention_count > 0
      ? h("span", { class: "mention-badge", "aria-label": `${item.mention_count} unread mentions` }, `@${item.mention_count}`) : null;
    const badge = item.unread > 0 ? h("span", { class: "badge", "aria-label": `${item.unread} unread` }, item.unread) : null;
    return h("li", {
      class: `conversation-item${this.open?.id === item.conversation_id ? " selected" : ""}`,
      "data-id": item.conversation_id, onclick: () => this.openConversation(item.conversation_id),
    }, h("div", { class: "title" }, h("span", { class: "name" }, item.title || item.conversation_id),
      h("span", { class: "badges" }, mentions, badge)),
    h("div", { class: "preview" }, item.tier === "mention_only" ? h("span", { class: "tier-mark", title: "Notifies only of @mentions" }, "@ only · ") : null,
      item.preview || ""));
  }

  async openConversation(id) {
    this.rooms.openId = null;
    const group = new Group(this.rest, id, this.client.userId);
    this.open = { id, messages: new Map(), hasMore: false, group };
    this.typingLine = h("p", { id: "typing", class: "typing" });
    this.timeline = h("ol", { id: "messages", class: "messages" });
    this.older = h("button", { id: "older", class: "older", hidden: true, onclick: () => this.loadPage() }, "Older messages");
    this.composer = new Composer(this.client, id, group, (ack) => this.refreshOne(ack.conversation_seq));
    const item = this.conversations.get(id);
    this.pane.className = "conversation";
    this.title = h("h2", {}, item?.title || id);
    this.groupTools = h("span", { class: "group-tools" });
    this.pane.replaceChildren(
      h("header", {}, h("button", { class: "back", "aria-label": "Back to conversations", onclick: () => this.close() }, "←"),
        this.title, this.groupTools, item?.kind === "group" ? this.addMemberForm(id) : null, this.callForm(id)),
      h("div", { class: "conversation-body" }, h("div", { class: "timeline" }, this.older, this.timeline, this.typingLine),
        this.memberPanel(group)),
      this.composer.element);
    await Promise.all([this.loadPage(), this.loadGroup()]);
    await this.markRead();
  }

  memberPanel(group) {
    this.members = new MemberPanel(group, this.rest, {
      changed: (answer) => this.afterGroupChange(answer),
      left: () => this.close(),
    });
    return this.members.element;
  }

  /** After a change this device made over REST: its own event never comes back to it (§5.2),
   * so the row is read by HISTORY, and the group and the list again. */
  async afterGroupChange(answer) {
    await Promise.all([this.loadGroup(), this.refreshOne(answer?.conversation_seq), this.refreshList()]);
  }

  /** The group's settings, my role and tier, and its members: read when a conversation opens
   * and again on every group or membership event in it. */
  async loadGroup() {
    const open = this.open;
    if (!open) return;
    try {
      await open.group.load();
    } catch {
      return; // the header keeps its defaults; the next event tries again
    }
    if (this.open !== open) return;
    const { info } = open.group;
    this.title.textContent = info.title || this.conversations.get(open.id)?.title || open.id;
    this.groupTools.replaceChildren(...(info.kind === "group" ? [this.members.button] : []),
      ...(info.kind === "group" && info.member ? [tierControl(this.rest, open.id, this.client.userId, info.tier, () => this.refreshList())] : []));
    const addForm = this.pane.querySelector("#add-member-form");
    if (addForm) addForm.hidden = !open.group.mayAddMembers;
    this.members.render();
  }

  /** The right-hand pane for something that is not a conversation (a room). */
  showPane(title, ...parts) {
    const onClose = parts.pop();
    this.open = null;
    this.pane.className = "conversation";
    this.pane.replaceChildren(h("header", {}, h("button", { class: "back", onclick: () => { onClose(); this.close(); } }, "←"),
      h("h2", {}, title)), ...parts);
  }

  close() {
    this.open = null;
    this.pane.className = "conversation empty";
    this.pane.replaceChildren(h("p", { class: "hint" }, "Pick a conversation"));
    this.refreshList();
  }

  /** Add people to a group (POST conversations/{id}/members); their join shows in the timeline. */
  addMemberForm(id) {
    const input = h("input", { name: "member", id: "add-member", placeholder: "add member", required: true });
    const form = h("form", { id: "add-member-form", class: "call-form" }, input, h("button", { type: "submit" }, "Add"));
    // A refusal marks the field invalid, which would block the next submit: typing clears it.
    input.addEventListener("input", () => input.setCustomValidity(""));
    form.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      const userIds = input.value.split(",").map((m) => m.trim()).filter(Boolean);
      try {
        const answer = await this.rest.addMembers(id, userIds);
        input.value = "";
        await this.afterGroupChange(answer);
      } catch (failure) {
        input.setCustomValidity(failure.message);
        input.reportValidity();
      }
    });
    return form;
  }

  /** Call a member: the last other sender is offered. */
  callForm(id) {
    const input = h("input", { name: "callee", id: "callee", placeholder: "user to call", required: true });
    const form = h("form", { id: "call-form", class: "call-form" }, input, h("button", { type: "submit" }, "Call"));
    input.addEventListener("input", () => input.setCustomValidity(""));
    form.addEventListener("submit", (submit) => {
      submit.preventDefault();
      this.callPanel.invite(id, input.value.trim()).catch((failure) => { input.setCustomValidity(failure.message); input.reportValidity(); });
    });
    return form;
  }

  /** One HISTORY page older than what is shown (the newest page first). */
  async loadPage() {
    const open = this.open;
    const oldest = Math.min(...open.messages.keys());
    const batch = await this.client.messages.history(open.id, Number.isFinite(oldest) ? { beforeSeq: oldest, limit: 30 } : { limit: 30 });
    if (this.open !== open) return;
    batch.messages.forEach((message) => open.messages.set(message.conversation_seq, message));
    open.hasMore = Boolean(batch.has_more);
    this.older.hidden = !open.hasMore;
    this.renderTimeline();
  }

  async refreshOne(seq) {
    if (!this.open || !seq) return;
    const open = this.open;
    const batch = await this.client.messages.history(open.id, { afterSeq: seq - 1, limit: 1 });
    const message = batch.messages.find((m) => m.conversation_seq === seq);
    if (message && this.open === open) {
      open.messages.set(seq, message);
      // Quotes show their target as it is now (§17.3): an edit or recall reaches them too.
      for (const other of open.messages.values()) {
        if (other.reply_to?.conversation_seq === seq) other.reply_to = { ...other.reply_to, state: message.state, preview: message.preview };
      }
      this.renderTimeline();
    }
  }

  renderTimeline() {
    const seqs = [...this.open.messages.keys()].sort((a, b) => a - b);
    this.timeline.replaceChildren(...seqs.map((seq) => this.messageItem(this.open.messages.get(seq))));
    this.watchPresence(seqs.map((seq) => this.open.messages.get(seq).sender_id));
    const other = seqs.map((seq) => this.open.messages.get(seq).sender_id).reverse().find((user) => user !== this.client.userId);
    const callee = this.pane.querySelector("#callee");
    if (other && callee && !callee.value) callee.value = other;
    this.timeline.lastElementChild?.scrollIntoView({ block: "end" });
  }

  /** PRESENCE_SUB for the people in the open timeline (the SDK re-subscribes on reconnect). */
  watchPresence(senders) {
    this.watched ??= new Set();
    const fresh = [...new Set(senders)].filter((user) => user !== this.client.userId && !this.watched.has(user));
    if (fresh.length === 0) return;
    fresh.forEach((user) => this.watched.add(user));
    this.client.presence.subscribe(fresh).then(() => this.open && this.renderTimeline()).catch(() => {});
  }

  presenceDot(userId) {
    if (userId === this.client.userId) return null;
    const online = this.client.presence.isOnline(userId);
    const state = online === undefined ? "unknown" : online ? "online" : "offline";
    return h("span", { class: `presence ${state}`, title: state, "data-user": userId });
  }

  messageItem(message) {
    if (isSystemRow(message)) {
      // Not a `.message`: nobody sent it, and it takes no reply, reaction or edit.
      return h("li", { class: "system", "data-seq": message.conversation_seq }, systemText(message));
    }
    const me = this.client.userId;
    const own = message.sender_id === me;
    const recalled = message.state === "recalled";
    const now = Date.now();
    const actions = [];
    if (!recalled && this.conversations.get(message.conversation_id)?.member !== false) {
      actions.push(h("button", { class: "reply", "aria-label": `Reply to ${message.sender_id}`, onclick: () => this.composer.replyTo(message) }, "Reply"));
    }
    if (own && !recalled && message.content_type === "text" && message.editable_until_ms > now) {
      actions.push(h("button", { class: "edit", onclick: () => this.edit(message) }, `Edit (until ${clock(message.editable_until_ms)})`));
    }
    if (own && !recalled && message.recallable_until_ms > now) {
      actions.push(h("button", { class: "recall", onclick: () => this.recall(message) }, `Recall (until ${clock(message.recallable_until_ms)})`));
    }
    const classes = ["message", own && "own", recalled && "recalled", mentionsMe(message, me) && "mentions-me"].filter(Boolean);
    return h("li", { class: classes.join(" "), "data-seq": message.conversation_seq },
      h("div", { class: "meta" }, this.presenceDot(message.sender_id), h("span", { class: "sender" }, message.sender_id), " ", clock(message.sent_at_ms),
        message.state === "edited" ? h("span", { class: "edited" }, " (edited)") : null),
      message.reply_to ? quoteBlock(message.reply_to) : null,
      h("div", { class: `text${message.content_type !== "text" ? " custom" : ""}` }, messageText(message, this.client.registry, me)),
      recalled ? null : this.reactionBar(message), h("div", { class: "actions" }, actions));
  }

  reactionBar(message) {
    const counts = message.reactions?.counts || {};
    const keys = [...new Set([...REACTIONS, ...Object.keys(counts)])];
    return h("div", { class: "reactions" }, keys.map((key) => {
      const mine = this.mine.has(`${message.conversation_seq}:${key}`);
      return h("button", { class: `reaction${mine ? " mine" : ""}`, "data-key": key, onclick: () => this.react(message, key) },
        key, counts[key] ? h("span", { class: "count" }, counts[key]) : null);
    }));
  }

  async react(message, key) {
    const mark = `${message.conversation_seq}:${key}`;
    const action = this.mine.has(mark) ? "remove" : "add";
    const ack = await this.client.messages.react(message.conversation_id, message.conversation_seq, key, action);
    if (action === "add") this.mine.add(mark); else this.mine.delete(mark);
    this.setCounts(message.conversation_id, message.conversation_seq, ack.counts, ack.summary_version);
  }

  onReactions(push) {
    this.setCounts(push.conversation_id, push.conversation_seq, push.counts, push.summary_version);
  }

  setCounts(conversationId, seq, counts, version) {
    const message = this.open?.id === conversationId ? this.open.messages.get(seq) : undefined;
    if (!message || (message.reactions && message.reactions.summary_version > version)) return;
    message.reactions = { counts, summary_version: version };
    this.renderTimeline();
  }

  async edit(message) {
    const text = window.prompt("Edit message", message.payload?.text ?? "");
    if (text === null || text === "") return;
    const addressed = this.open ? addressing(text, this.open.group, message) : {};
    await this.client.messages.edit(message.conversation_id, message.conversation_seq, { text }, addressed);
    await this.refreshOne(message.conversation_seq);
  }

  async recall(message) {
    await this.client.messages.recall(message.conversation_id, message.conversation_seq);
    await this.refreshOne(message.conversation_seq);
  }

  onTyping(push) {
    if (this.open?.id !== push.conversation_id) return;
    if (push.state === "stop") this.typingUntil.delete(push.user_id);
    else this.typingUntil.set(push.user_id, Date.now() + TYPING_SHOWN_MS);
    this.renderTyping();
    setTimeout(() => this.renderTyping(), TYPING_SHOWN_MS + 50);
  }

  renderTyping() {
    const now = Date.now();
    const who = [...this.typingUntil].filter(([, until]) => until > now).map(([user]) => user);
    if (this.typingLine) this.typingLine.textContent = who.length ? `${who.join(", ")} typing…` : "";
  }

  /** A mailbox or live event: a new message joins the open timeline; an edit or recall
   * refreshes its target; a group or membership change reloads the group; the list (order,
   * previews, badges) is re-read either way. */
  async onEvent(event) {
    const open = this.open;
    if (open && event.conversation_id === open.id) {
      const target = event.message?.target_conversation_seq ?? event.control?.target_conversation_seq;
      if (event.message && isShownRow(event.message)) {
        open.messages.set(event.message.conversation_seq, event.message);
        this.typingUntil.delete(event.message.sender_id);
        this.renderTyping();
        this.renderTimeline();
      }
      if (target) await this.refreshOne(target);
      const custom = event.control?.custom_type;
      if (custom === GROUP || custom === MEMBERSHIP) await this.loadGroup();
      if (document.visibilityState === "visible") await this.markRead();
    }
    await this.refreshList();
  }

  async markRead() {
    const open = this.open;
    const item = this.conversations.get(open?.id);
    const latest = Math.max(item?.last_seq ?? 0, ...open.messages.keys());
    if (latest > 0) await this.client.messages.markRead(open.id, latest).catch(() => {});
    await this.refreshList();
  }
}
