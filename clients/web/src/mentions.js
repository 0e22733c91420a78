/** Mentions in the web client (protocol §17.2): the composer's @ autocomplete, which user ids
 * a text names, and mentions highlighted in a shown message. The server never reads the text:
 * the SEND's `mentions` list is what notifies, and only what a message's list names is highlighted. */
import { h } from "./dom.js";

/** A user id's characters (the `username` rule of POST users). */
const ID_CHAR = "A-Za-z0-9_.@-";
const MAX_OPTIONS = 8;
/** `@` then the word being typed, right before the caret; the `@` starts the text or follows a space. */
const TYPING = new RegExp(`(?:^|\\s)@([${ID_CHAR}]*)$`);

function escaped(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** `@name` as a whole word: not inside an address (x@y), not the start of a longer id; a
 * trailing full stop is punctuation. */
function mentionPattern(names, flags = "") {
  const alternatives = [...names].sort((a, b) => b.length - a.length).map(escaped).join("|");
  return new RegExp(`(?<![${ID_CHAR}])@(${alternatives})(?![A-Za-z0-9_@-]|\\.[A-Za-z0-9_])`, flags);
}

/** The user ids of `ids` that `text` names as `@id`. */
export function mentionedIn(text, ids) {
  return ids.filter((id) => mentionPattern([id]).test(text));
}

/** Whether `text` has an `@all`. */
export function mentionsAll(text) {
  return mentionPattern(["all"]).test(text);
}

/** Does someone else's message mention `me` (by name, or @all)? A recalled one no longer counts (§17.2). */
export function mentionsMe(message, me) {
  if (message.sender_id === me || message.state === "recalled" || message.state === "deleted") return false;
  return message.mention_all === true || (message.mentions ?? []).includes(me);
}

/** The text as nodes, with the mentions the message's list names marked; mine stand out. */
export function highlighted(text, message, me) {
  const names = [...(message.mentions ?? []), ...(message.mention_all ? ["all"] : [])];
  if (names.length === 0) return [text];
  const nodes = [];
  let at = 0;
  for (const match of text.matchAll(mentionPattern(names, "g"))) {
    const mine = match[1] === me || match[1] === "all";
    nodes.push(text.slice(at, match.index),
      h("span", { class: `mention${mine ? " me" : ""}`, "data-user": match[1] }, match[0]));
    at = match.index + match[0].length;
  }
  nodes.push(text.slice(at));
  return nodes;
}

/**
 * The @ autocomplete of one text input: typing `@` and the start of a user id or name offers
 * the matching members (and `@all` where the caller may use it) in a listbox; arrows move,
 * Enter or Tab inserts `@user_id `, Escape closes. `members()` answers [{user_id, display_name}].
 */
export class MentionPicker {
  constructor(input, { members, mayMentionAll }) {
    Object.assign(this, { input, members, mayMentionAll });
    this.options = [];
    this.active = 0;
    this.list = h("ul", { id: "mention-options", class: "mention-options", role: "listbox", "aria-label": "Mention", hidden: true });
    input.setAttribute("role", "combobox");
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-controls", "mention-options");
    input.setAttribute("aria-expanded", "false");
    input.addEventListener("input", () => this.update());
    input.addEventListener("keydown", (key) => this.onKey(key));
    input.addEventListener("blur", () => this.close());
  }

  get isOpen() {
    return !this.list.hidden;
  }

  /** The `@word` before the caret, if the caret is in one. */
  typed() {
    const caret = this.input.selectionStart ?? this.input.value.length;
    const match = TYPING.exec(this.input.value.slice(0, caret));
    return match ? { query: match[1], start: caret - match[1].length - 1, end: caret } : null;
  }

  update() {
    const typed = this.typed();
    if (typed === null) return this.close();
    const query = typed.query.toLowerCase();
    const matches = this.members().filter(({ user_id: id, display_name: name }) =>
      id.toLowerCase().startsWith(query) || (name ?? "").toLowerCase().includes(query));
    matches.sort((a, b) => Number(!a.user_id.toLowerCase().startsWith(query)) - Number(!b.user_id.toLowerCase().startsWith(query)));
    const everyone = this.mayMentionAll() && "all".startsWith(query) ? [{ user_id: "all", display_name: "everyone here" }] : [];
    this.options = [...everyone, ...matches].slice(0, MAX_OPTIONS);
    if (this.options.length === 0) return this.close();
    this.active = Math.min(this.active, this.options.length - 1);
    this.render();
  }

  render() {
    this.list.replaceChildren(...this.options.map((option, index) => h("li", {
      id: `mention-option-${index}`, role: "option", "aria-selected": String(index === this.active),
      class: "mention-option", "data-user": option.user_id,
      // mousedown, not click: the input keeps its focus (and its caret) until the choice is made.
      onmousedown: (press) => { press.preventDefault(); this.choose(option); },
    }, h("strong", {}, `@${option.user_id}`),
    option.display_name && option.display_name !== option.user_id ? h("span", {}, ` ${option.display_name}`) : null)));
    this.list.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
    this.input.setAttribute("aria-activedescendant", `mention-option-${this.active}`);
  }

  close() {
    this.list.hidden = true;
    this.options = [];
    this.active = 0;
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  onKey(key) {
    if (!this.isOpen) return;
    const moves = { ArrowDown: 1, ArrowUp: -1 };
    if (key.key in moves) {
      this.active = (this.active + moves[key.key] + this.options.length) % this.options.length;
      this.render();
    } else if (key.key === "Enter" || key.key === "Tab") {
      this.choose(this.options[this.active]);
    } else if (key.key === "Escape") {
      this.close();
    } else {
      return;
    }
    key.preventDefault(); // Enter would submit the form; Escape would cancel a reply too (composer.js)
  }

  /** Replaces the typed `@word` with `@user_id ` and puts the caret after it. */
  choose(option) {
    const typed = this.typed();
    if (typed === null) return this.close();
    const value = this.input.value;
    const inserted = `@${option.user_id} `;
    this.input.value = value.slice(0, typed.start) + inserted + value.slice(typed.end).replace(/^ /, "");
    const caret = typed.start + inserted.length;
    this.input.setSelectionRange(caret, caret);
    this.close();
  }
}
