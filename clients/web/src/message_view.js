/** How a timeline row reads: a message's text (mentions marked), the quote above a reply, and
 * membership and group events as one line of who did what (protocol §14, §17). */
import { h } from "./dom.js";
import { highlighted } from "./mentions.js";

export const MEMBERSHIP = "qim.membership.v1";
export const GROUP = "qim.group.v1";
const CALL_RECORD = "qim.call_record.v1";
const ROLE_WORDS = { owner: "the owner", admin: "an admin", member: "a member" };
const POLICY_WORDS = { admins: "the owner and admins", members: "everyone" };

/** Rows shown as a line of their own rather than as a message. */
export function isSystemRow(message) {
  return message.content_type === MEMBERSHIP || message.content_type === GROUP;
}

/** Built-in rows the open timeline takes from live events (other `qim.*` rows are not shown). */
export function isShownRow(message) {
  return !message.content_type.startsWith("qim.") || message.content_type === CALL_RECORD || isSystemRow(message);
}

function list(ids) {
  return ids.length <= 1 ? ids.join("") : `${ids.slice(0, -1).join(", ")} and ${ids.at(-1)}`;
}

/** "alice added bob", "alice made bob an admin", "alice renamed the group to “Ops”". */
export function systemText(message) {
  const actor = message.sender_id;
  const payload = message.payload ?? {};
  if (message.content_type === MEMBERSHIP) {
    const ids = payload.user_ids ?? [];
    if (payload.action === "leave") return `${list(ids)} left`;
    if (payload.action === "remove") return `${actor} removed ${list(ids)}`;
    if (ids.length === 1 && ids[0] === actor) return `${actor} joined`;
    return `${actor} added ${list(ids)}`;
  }
  if (payload.action === "role") {
    return Object.entries(payload.roles ?? {}).map(([user, role]) => `${actor} made ${user} ${ROLE_WORDS[role] ?? role}`).join("; ");
  }
  if (payload.action === "update") {
    const changes = payload.changes ?? {};
    const said = [];
    if ("title" in changes) said.push(`renamed the group to “${changes.title}”`);
    if ("mention_all_policy" in changes) said.push(`let ${POLICY_WORDS[changes.mention_all_policy]} @all`);
    if ("add_members_policy" in changes) said.push(`let ${POLICY_WORDS[changes.add_members_policy]} add members`);
    return `${actor} ${said.join(", ") || "changed the group"}`;
  }
  return message.preview || "[group changed]";
}

/** A message's text: its own for `text` (mentions marked), a call record in words, a
 * registered type as its registry placeholder (current: it follows REGISTRY_UPDATED), an
 * unknown type as the server's preview. */
export function messageText(message, registry, me) {
  if (message.state === "recalled") return ["[recalled]"];
  if (message.content_type === "text") return highlighted(message.payload?.text ?? message.preview, message, me);
  if (message.content_type === CALL_RECORD && message.payload) {
    const { outcome, duration_s: seconds, caller_id: caller } = message.payload;
    return [`📞 Call from ${caller} ${outcome}${outcome === "completed" ? ` (${seconds} s)` : ""}`];
  }
  const type = registry.get(message.content_type);
  if (!type) return [message.preview || "[message]"];
  return [type.preview_template.replaceAll("{sender_id}", message.sender_id).replaceAll("{content_type}", message.content_type)];
}

/** The quoted message above a reply, as it is now: recalled and deleted ones say so. */
export function quoteBlock(reply) {
  const gone = reply.state === "recalled" || reply.state === "deleted";
  const text = reply.state === "deleted" && !reply.preview ? "[deleted]" : reply.preview || "[message]";
  return h("div", { class: `quote${gone ? " gone" : ""}`, "data-reply-to": reply.conversation_seq },
    h("span", { class: "quote-sender" }, reply.sender_id ?? "someone"),
    h("span", { class: "quote-text" }, text));
}
