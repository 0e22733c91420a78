/**
 * Groups against a real QIM server (protocol §17): a reply that mentions, read back in HISTORY
 * and counted in the list; roles, settings and member pages over REST, each change a
 * qim.group.v1 event; @all as the policy allows; and the mention_only tier, where a message
 * that does not mention you arrives live (no mailbox_seq, the cursor stays) and one that does
 * arrives in the mailbox right after the cursor.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { QimError, type LiveEvent, type MailboxEvent, type QimClient } from "../src/index.js";
import { QimServer, waitFor, type Persona } from "./server.js";

const server = new QimServer();

before(() => server.start());
after(() => server.stop());

function collect(client: QimClient): { events: MailboxEvent[]; live: LiveEvent[] } {
  const seen = { events: [] as MailboxEvent[], live: [] as LiveEvent[] };
  client.mailbox.on("event", (event) => seen.events.push(event));
  client.mailbox.on("live", (event) => seen.live.push(event));
  return seen;
}

async function trio(): Promise<{ alice: Persona; bob: Persona; carol: Persona; conversationId: string }> {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const carol = await server.persona("carol");
  const { conversation_id } = await (await alice.rest()).createConversation("group", [bob.userId, carol.userId], { title: "lunch" });
  return { alice, bob, carol, conversationId: conversation_id };
}

test("a reply with mentions: HISTORY carries both, the list counts the mention, MARK_READ clears it", async () => {
  const { alice, bob, carol, conversationId } = await trio();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const bobSeen = collect(b);
  const question = await b.messages.sendText(conversationId, "lunch?");
  const reply = await a.messages.sendText(conversationId, `@${bob.userId} @${carol.userId} yes`, {
    mentions: [bob.userId, carol.userId], replyTo: question.conversation_seq,
  });
  await waitFor(() => bobSeen.events.some((e) => e.message?.conversation_seq === reply.conversation_seq), "the reply's EVENT");
  const pushed = bobSeen.events.find((e) => e.message?.conversation_seq === reply.conversation_seq)?.message;
  assert.deepEqual(pushed?.mentions, [bob.userId, carol.userId]);

  const page = await b.messages.history(conversationId);
  const [first, second] = page.messages;
  assert.deepEqual([first.mentions, first.mention_all, first.reply_to], [[], false, undefined]);
  assert.deepEqual(second.mentions, [bob.userId, carol.userId]);
  assert.equal(second.mention_all, false);
  assert.deepEqual(second.reply_to, {
    conversation_seq: question.conversation_seq, sender_id: bob.userId, content_type: "text", preview: "lunch?", state: "normal",
  });

  const item = (await b.messages.conversations()).items.find((i) => i.conversation_id === conversationId);
  assert.deepEqual([item?.mention_count, item?.role, item?.tier], [1, "member", "full"]);
  await b.messages.markRead(conversationId, reply.conversation_seq as number);
  const read = (await b.messages.conversations()).items.find((i) => i.conversation_id === conversationId);
  assert.equal(read?.mention_count, 0);

  // The quote follows its target: recalled, it shows as recalled.
  await b.messages.recall(conversationId, question.conversation_seq as number);
  const after = await a.messages.history(conversationId);
  const quote = after.messages.find((m) => m.conversation_seq === reply.conversation_seq)?.reply_to;
  assert.deepEqual([quote?.state, quote?.preview], ["recalled", "[recalled]"]);
});

test("roles and settings over REST: each change is a qim.group.v1 event; @all follows the policy", async () => {
  const { alice, bob, carol, conversationId } = await trio();
  const aliceRest = await alice.rest();
  const bobRest = await bob.rest();
  const b = await bob.client();
  const bobSeen = collect(b);
  await b.connect();

  const info = await bobRest.getConversation(conversationId);
  assert.deepEqual(
    [info.kind, info.title, info.role, info.tier, info.member, info.member_count, info.mention_all_policy, info.add_members_policy],
    ["group", "lunch", "member", "full", true, 3, "admins", "members"],
  );
  const pages: string[][] = [];
  for await (const members of bobRest.memberPages(conversationId, 2)) pages.push(members.map((m) => `${m.user_id}:${m.role}`));
  assert.deepEqual(pages, [[`${alice.userId}:owner`, `${bob.userId}:member`], [`${carol.userId}:member`]]);

  // A member may not @all (the default policy is `admins`) nor change roles.
  await assert.rejects(b.messages.sendText(conversationId, "@all", { mentionAll: true }), (error: unknown) => {
    return error instanceof QimError && error.code === "forbidden";
  });
  await assert.rejects(bobRest.setMemberRole(conversationId, carol.userId, "admin"), (error: any) => error.status === 403);

  const promoted = await aliceRest.setMemberRole(conversationId, bob.userId, "admin");
  assert.equal(promoted.role, "admin");
  assert.equal(typeof promoted.conversation_seq, "number");
  const again = await aliceRest.setMemberRole(conversationId, bob.userId, "admin");
  assert.equal(again.conversation_seq, null);
  const groupEvents = () => bobSeen.events.filter((e) => e.control?.custom_type === "qim.group.v1");
  await waitFor(() => groupEvents().length === 1, "the role event");
  assert.deepEqual(groupEvents()[0].control?.payload, { action: "role", roles: { [bob.userId]: "admin" } });
  assert.equal(groupEvents()[0].message?.conversation_seq, promoted.conversation_seq); // a timeline row

  // An admin may @all and set the group's settings.
  const all = await b.messages.sendText(conversationId, "@all noon", { mentionAll: true });
  const updated = await bobRest.updateConversation(conversationId, { title: "lunch club", add_members_policy: "admins" });
  assert.deepEqual([updated.title, updated.add_members_policy], ["lunch club", "admins"]);
  assert.equal(updated.conversation_seq, (all.conversation_seq as number) + 1);
  assert.equal((await bobRest.getConversation(conversationId)).title, "lunch club");
  await bobRest.removeMember(conversationId, carol.userId);
  assert.deepEqual((await bobRest.listMembers(conversationId)).members.map((m) => m.user_id), [alice.userId, bob.userId]);
});

test("mention_only: a plain message arrives live and leaves the cursor; a mention comes through the mailbox", async () => {
  const { alice, carol, conversationId } = await trio();
  const a = await alice.client();
  const c = await carol.client();
  const carolSeen = collect(c);
  await a.connect();
  const synced = c.mailbox.next("synced", 30_000);
  await c.connect();
  await synced;
  await a.messages.sendText(conversationId, "while full");
  await waitFor(() => carolSeen.events.length === 1, "the full tier's EVENT");
  const cursor = c.mailbox.cursor;

  const switched = await (await carol.rest()).setTier(conversationId, carol.userId, "mention_only");
  assert.deepEqual(switched, { user_id: carol.userId, tier: "mention_only" });
  const plain = await a.messages.sendText(conversationId, "not for carol");
  await waitFor(() => carolSeen.live.length === 1, "the live EVENT");
  const live = carolSeen.live[0];
  assert.equal(live.live, true);
  assert.equal("mailbox_seq" in live, false);
  assert.equal(live.message?.conversation_seq, plain.conversation_seq);
  assert.equal(live.message?.render?.kind, "text");
  assert.equal(c.mailbox.cursor, cursor);
  assert.equal(carolSeen.events.length, 1);

  // An edit that adds carol's mention gives her an entry; so does a new message naming her.
  await a.messages.edit(conversationId, plain.conversation_seq as number, { text: "now for carol" }, { mentions: [carol.userId] });
  await waitFor(() => carolSeen.events.length === 2, "the edit's mailbox EVENT");
  const edit = carolSeen.events[1];
  assert.deepEqual([edit.mailbox_seq, edit.control?.custom_type, edit.control?.mentions], [cursor + 1, "qim.edit.v1", [carol.userId]]);
  await a.messages.sendText(conversationId, `@${carol.userId}`, { mentions: [carol.userId] });
  await waitFor(() => carolSeen.events.length === 3, "the mention's mailbox EVENT");
  assert.equal(carolSeen.events[2].mailbox_seq, cursor + 2);
  const item = (await c.messages.conversations()).items.find((i) => i.conversation_id === conversationId);
  assert.deepEqual([item?.tier, item?.mention_count, item?.unread], ["mention_only", 2, 3]);
});
