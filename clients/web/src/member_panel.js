/** The member panel of a group (protocol §17.1): members with their roles; for the owner,
 * make or unmake admins; for the owner and admins, remove members and change the group's
 * title and policies; for everyone, leave. Every change is a REST call; the panel is drawn
 * again from the server's answer (and on the qim.group.v1 event other devices get). */
import { h } from "./dom.js";

const POLICY_NAMES = { admins: "Owner and admins", members: "Everyone" };
const ROLE_NAMES = { owner: "Owner", admin: "Admin", member: "Member" };

export class MemberPanel {
  /** `changed()` runs after a change of mine (the chat reloads the group and the list); `left()` after Leave. */
  constructor(group, rest, { changed, left }) {
    Object.assign(this, { group, rest, changed, left });
    this.element = h("aside", { id: "member-panel", class: "member-panel", "aria-label": "Members", hidden: true });
    this.button = h("button", { id: "members-toggle", type: "button", "aria-controls": "member-panel", "aria-expanded": "false",
      onclick: () => this.toggle() }, "Members");
  }

  get shown() {
    return !this.element.hidden;
  }

  toggle() {
    this.element.hidden = !this.element.hidden;
    this.button.setAttribute("aria-expanded", String(this.shown));
    if (this.shown) this.render();
  }

  render(error = "") {
    if (!this.shown) return;
    const { group } = this;
    const info = group.info;
    this.element.replaceChildren(...[
      h("header", {}, h("h3", {}, `Members (${info?.member_count ?? group.members.length})`),
        h("button", { class: "close", "aria-label": "Close members", onclick: () => this.toggle() }, "×")),
      h("p", { class: "error", role: "alert" }, error),
      info && group.isGroup ? this.settings(info) : null,
      h("ul", { id: "member-list", class: "member-list" }, group.members.map((member) => this.memberItem(member))),
      group.next !== null ? h("button", { class: "more", onclick: () => this.run(() => group.loadMore(), false) }, "More members") : null,
      info?.member && group.isGroup ? h("button", { id: "leave-group", class: "leave", onclick: () => this.leave() }, "Leave group") : null,
    ].filter(Boolean)); // replaceChildren would write a null as the text "null"
  }

  memberItem(member) {
    const { group } = this;
    const you = member.user_id === group.me;
    const actions = [];
    if (group.mayChangeRole(member)) {
      actions.push(member.role === "admin"
        ? h("button", { class: "demote", "aria-label": `Make ${member.user_id} a member`,
          onclick: () => this.setRole(member, "member") }, "Make member")
        : h("button", { class: "promote", "aria-label": `Make ${member.user_id} an admin`,
          onclick: () => this.setRole(member, "admin") }, "Make admin"));
    }
    if (group.mayRemove(member)) {
      actions.push(h("button", { class: "remove", "aria-label": `Remove ${member.user_id}`,
        onclick: () => this.remove(member) }, "Remove"));
    }
    const name = member.display_name && member.display_name !== member.user_id ? member.display_name : null;
    return h("li", { class: "member", "data-user": member.user_id },
      h("span", { class: "who" }, h("span", { class: "name" }, name ?? member.user_id),
        name ? h("span", { class: "user-id" }, ` @${member.user_id}`) : null, you ? h("span", { class: "you" }, " (you)") : null),
      h("span", { class: `role role-${member.role}` }, ROLE_NAMES[member.role] ?? member.role),
      actions.length ? h("span", { class: "member-actions" }, actions) : null);
  }

  /** The title and policies: a form for the owner and admins, a summary for members. */
  settings(info) {
    if (!this.group.manages) {
      return h("dl", { id: "group-policies", class: "group-policies" },
        h("dt", {}, "Who may @all"), h("dd", {}, POLICY_NAMES[info.mention_all_policy]),
        h("dt", {}, "Who may add members"), h("dd", {}, POLICY_NAMES[info.add_members_policy]));
    }
    const policy = (name, label) => h("label", {}, label,
      h("select", { name }, Object.entries(POLICY_NAMES).map(([value, text]) =>
        h("option", { value, selected: info[name] === value }, text))));
    const form = h("form", { id: "group-settings", class: "group-settings" },
      h("label", {}, "Title", h("input", { name: "title", value: info.title, maxlength: 200 })),
      policy("mention_all_policy", "Who may @all"),
      policy("add_members_policy", "Who may add members"),
      h("button", { type: "submit" }, "Save"));
    form.addEventListener("submit", (submit) => {
      submit.preventDefault();
      const fields = Object.fromEntries(new FormData(form));
      const changes = Object.fromEntries(Object.entries(fields).filter(([name, value]) => info[name] !== value));
      if (Object.keys(changes).length) this.run(() => this.rest.updateConversation(this.group.conversationId, changes));
    });
    return form;
  }

  setRole(member, role) {
    return this.run(() => this.rest.setMemberRole(this.group.conversationId, member.user_id, role));
  }

  remove(member) {
    return this.run(() => this.rest.removeMember(this.group.conversationId, member.user_id));
  }

  async leave() {
    if (!window.confirm("Leave this group?")) return;
    try {
      await this.rest.removeMember(this.group.conversationId, this.group.me);
      this.left();
    } catch (failure) {
      this.render(failure.message);
    }
  }

  /** One change, then the group read again and the panel redrawn; a refusal is shown in the panel. */
  async run(change, reload = true) {
    try {
      const answer = await change();
      if (reload) await this.changed(answer);
      this.render();
    } catch (failure) {
      this.render(failure.message || "that did not work");
    }
  }
}
