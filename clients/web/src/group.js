/** What the open conversation lets me do (protocol §17.1): its settings and my role and tier
 * (GET conversations/{id}) and its current members (GET conversations/{id}/members), kept
 * for the composer's @ autocomplete, the member panel and the "Notify" control. */

/** Pages of 100 read for the autocomplete: a larger group offers its first 1 000 members. */
const MEMBER_PAGES = 10;

export class Group {
  constructor(rest, conversationId, me) {
    Object.assign(this, { rest, conversationId, me });
    this.info = null;
    this.members = [];
    this.next = null; // the `after` of the next members page, null when all are read
  }

  /** Reads the settings and the first pages of members again (after any group or membership event). */
  async load() {
    const [info, members] = await Promise.all([this.rest.getConversation(this.conversationId), this.readMembers()]);
    this.info = info;
    this.members = members.list;
    this.next = members.next;
  }

  async readMembers() {
    const list = [];
    let after;
    for (let page = 0; page < MEMBER_PAGES; page++) {
      const answer = await this.rest.listMembers(this.conversationId, { after, limit: 100 });
      list.push(...answer.members);
      if (answer.next === null) return { list, next: null };
      after = answer.next;
    }
    return { list, next: after };
  }

  /** The next page past what is held, for the member panel's "More members". */
  async loadMore() {
    if (this.next === null) return;
    const answer = await this.rest.listMembers(this.conversationId, { after: this.next, limit: 100 });
    this.members.push(...answer.members);
    this.next = answer.next;
  }

  get isGroup() {
    return this.info?.kind === "group";
  }

  get role() {
    return this.info?.role ?? "member";
  }

  get manages() {
    return this.role === "owner" || this.role === "admin";
  }

  get mayMentionAll() {
    return this.isGroup && this.info.member && (this.manages || this.info.mention_all_policy === "members");
  }

  get mayAddMembers() {
    return !this.info || (this.isGroup && (this.manages || this.info.add_members_policy === "members"));
  }

  /** The owner removes anyone, an admin removes members (§17.1); nobody removes themselves here (that is Leave). */
  mayRemove(member) {
    if (member.user_id === this.me || !this.isGroup) return false;
    return this.role === "owner" ? member.role !== "owner" : this.role === "admin" && member.role === "member";
  }

  /** Only the owner makes and unmakes admins. */
  mayChangeRole(member) {
    return this.isGroup && this.role === "owner" && member.user_id !== this.me && member.role !== "owner";
  }

  /** Members the autocomplete offers: everyone but me. */
  others() {
    return this.members.filter((member) => member.user_id !== this.me);
  }
}
