/**
 * Conversations against a real QIM server: AUTH and limits, two users chatting, HISTORY and
 * CONVERSATIONS paging, MARK_READ, edits and recalls, reactions, typing and presence, sync
 * after a dropped socket (nothing missed, nothing twice), the rate_limited retry, close 4401.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AuthError, Backoff, ConnectionLost, MemoryCursorStore, QimClient, QimError, type MailboxEvent, type ReactionUpdate,
} from "../src/index.js";
import { QimServer, waitFor, type Persona } from "./server.js";
import { WebSocket } from "ws";

// A low message rate, so the rate_limited retry is exercised without flooding.
const server = new QimServer({ QIM_PER_USER_MSG_RATE: "3", QIM_READ_SYNC_MERGE_WINDOW_S: "0.2" });

before(() => server.start());
after(() => server.stop());

function collect(client: QimClient): MailboxEvent[] {
  const events: MailboxEvent[] = [];
  client.mailbox.on("event", (event) => events.push(event));
  return events;
}

function texts(events: MailboxEvent[], conversationId: string): string[] {
  return events
    .filter((e) => e.kind === "message" && e.conversation_id === conversationId)
    .map((e) => (e.message?.payload as { text: string }).text);
}

async function pair(): Promise<{ alice: Persona; bob: Persona; conversationId: string }> {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const rest = await alice.rest();
  const { conversation_id } = await rest.createConversation("group", [bob.userId], { title: "team" });
  return { alice, bob, conversationId: conversation_id };
}

test("AUTH_OK carries the user and the server's limits", async () => {
  const alice = await server.persona("alice");
  const client = await alice.client();
  const authOk = await client.connect();
  assert.equal(authOk.user_id, alice.userId);
  assert.equal(authOk.tenant, "jsdk");
  assert.equal(client.limits?.per_user_msg_rate, 3);
  assert.equal(typeof client.limits?.recall_self_window_s, "number");
  assert.ok((await client.ping()) > 0);
});

test("two users chat: EVENTs in order on every device, HISTORY and CONVERSATIONS paged", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const seenByBob = collect(b);
  const seenByAlice = collect(a);
  for (const text of ["one", "two", "three", "four", "five"]) {
    const ack = await a.messages.sendText(conversationId, text);
    assert.equal(typeof ack.conversation_seq, "number");
  }
  await waitFor(() => texts(seenByBob, conversationId).length === 5, "bob's 5 events");
  assert.deepEqual(texts(seenByBob, conversationId), ["one", "two", "three", "four", "five"]);
  await waitFor(() => texts(seenByAlice, conversationId).length === 5, "alice's own 5 events");
  assert.equal(seenByBob[0].message?.render?.kind, "text");

  const pages: number[][] = [];
  for await (const page of b.messages.historyPages(conversationId, { limit: 2 })) {
    pages.push(page.map((m) => m.conversation_seq));
  }
  assert.deepEqual(pages, [[4, 5], [2, 3], [1]]);

  const list = await b.messages.conversations(1);
  const item = list.items.find((i) => i.conversation_id === conversationId);
  assert.equal(item?.unread, 5);
  assert.equal(item?.preview, "five");
  const read = await b.messages.markRead(conversationId, 5);
  assert.equal(read.unread, 0);
});

test("a SEND past per_user_msg_rate waits retry_after_ms and goes through, each message once", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const seen = collect(b);
  let refusals = 0;
  const sent = Array.from({ length: 10 }, (_, i) => `r${i + 1}`);
  const acks = await Promise.all(
    sent.map((text) => a.messages.sendText(conversationId, text, { onRateLimited: () => refusals++, maxRateLimitRetries: 20 })),
  );
  assert.ok(refusals > 0, "10 SENDs at once against a rate of 3/s must meet rate_limited");
  assert.equal(new Set(acks.map((ack) => ack.conversation_seq)).size, 10);
  await waitFor(() => texts(seen, conversationId).length === 10, "10 events");
  assert.deepEqual(new Set(texts(seen, conversationId)), new Set(sent));
});

test("edit and recall reach the other member as control events; HISTORY shows the new state", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const seen = collect(b);
  const first = await a.messages.sendText(conversationId, "tpyo");
  const second = await a.messages.sendText(conversationId, "oops");
  await a.messages.edit(conversationId, first.conversation_seq as number, { text: "typo" });
  await a.messages.recall(conversationId, second.conversation_seq as number);
  const controls = () => seen.filter((e) => e.kind === "control").map((e) => e.control?.custom_type);
  await waitFor(() => controls().length === 2, "edit and recall events");
  assert.deepEqual(controls(), ["qim.edit.v1", "qim.recall.v1"]);
  const history = await b.messages.history(conversationId);
  assert.deepEqual(
    history.messages.map((m) => [m.state, m.payload]),
    [["edited", { text: "typo" }], ["recalled", null]],
  );
  await assert.rejects(b.messages.recall(conversationId, first.conversation_seq as number), (error: unknown) => {
    return error instanceof QimError && error.code === "forbidden";
  });
});

test("reactions: the ACK has the counts, the other member gets REACTION_UPDATE", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const updates: ReactionUpdate[] = [];
  a.onPush("REACTION_UPDATE", (frame) => updates.push(frame as ReactionUpdate));
  const sent = await a.messages.sendText(conversationId, "react to me");
  const ack = await b.messages.react(conversationId, sent.conversation_seq as number, "+1");
  assert.deepEqual(ack.counts, { "+1": 1 });
  await waitFor(() => updates.some((u) => u.counts["+1"] === 1), "REACTION_UPDATE");
  const history = await a.messages.history(conversationId);
  assert.deepEqual(history.messages[0].reactions?.counts, { "+1": 1 });
});

test("presence follows a user's connection; TYPING is relayed", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  await a.connect();
  const changes: boolean[] = [];
  a.presence.on("change", ({ user_id, online }) => user_id === bob.userId && changes.push(online));
  assert.deepEqual(await a.presence.subscribe([bob.userId]), { [bob.userId]: false });
  const b = await bob.client();
  await b.connect();
  await waitFor(() => a.presence.isOnline(bob.userId) === true, "bob online");
  const typing: string[] = [];
  a.onPush("TYPING", (frame) => typing.push(`${frame.user_id}:${frame.state}`));
  await b.messages.typing(conversationId, "start");
  await waitFor(() => typing.length === 1, "TYPING push");
  assert.deepEqual(typing, [`${bob.userId}:start`]);
  b.close();
  await waitFor(() => a.presence.isOnline(bob.userId) === false, "bob offline");
  assert.deepEqual(changes, [false, true, false]); // unknown -> offline (the ACK) -> online -> offline
});

test("a dropped socket reconnects and SYNCs: nothing sent meanwhile is missed or doubled", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  // A slow first retry leaves time to send while bob is away (the test passes either way).
  const b = await bob.client("phone", { backoff: new Backoff({ initialMs: 1500, jitter: 0 }) });
  await a.connect();
  await b.connect();
  const seen = collect(b);
  await a.messages.sendText(conversationId, "before");
  await waitFor(() => texts(seen, conversationId).length === 1, "the first event");
  const dropped = b.connection.next("disconnected", 30_000);
  b.connection.dropSocket();
  assert.equal((await dropped).willReconnect, true);
  for (const text of ["while", "you", "were", "away"]) await a.messages.sendText(conversationId, text);
  await b.connection.next("connected", 30_000);
  await a.messages.sendText(conversationId, "after");
  await waitFor(() => texts(seen, conversationId).length === 6, "6 events");
  assert.deepEqual(texts(seen, conversationId), ["before", "while", "you", "were", "away", "after"]);
  assert.equal(b.connection.reconnects, 1);
  const seqs = seen.map((e) => e.mailbox_seq);
  assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y));
  assert.equal(new Set(seqs).size, seqs.length);
});

test("a new session resumes from the stored cursor, paging SYNC: only what it has not seen", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  await a.connect();
  const store = new MemoryCursorStore();
  const first = await bob.client("laptop", { cursorStore: store });
  const seenFirst = collect(first);
  await first.connect();
  await a.messages.sendText(conversationId, "seen");
  await waitFor(() => texts(seenFirst, conversationId).length === 1, "the first session's event");
  first.close();
  await a.messages.sendText(conversationId, "missed 1");
  await a.messages.sendText(conversationId, "missed 2");
  // One event per SYNC page: the catch-up has to follow has_more.
  const second = await bob.client("laptop", { cursorStore: store, syncPageSize: 1 });
  const seenSecond = collect(second);
  const synced = second.mailbox.next("synced", 30_000);
  await second.connect();
  await synced;
  assert.deepEqual(texts(seenSecond, conversationId), ["missed 1", "missed 2"]);
});

test("a bad token is refused with 4401; a revoked one closes 4403 and ends reconnecting", async () => {
  const bad = new QimClient({ url: server.wsUrl, token: "no-such-token", deviceId: "phone", WebSocket });
  await assert.rejects(bad.connect(), (error: unknown) => error instanceof AuthError && error.closeCode === 4401);

  const carol = await server.persona("carol");
  const client = await carol.client("tablet");
  await client.connect();
  const closed = client.connection.next("closed", 30_000);
  await (await carol.rest("tablet")).logout();
  const final = await closed;
  assert.ok(final.error instanceof AuthError, String(final.error));
  assert.equal(final.code, 4403);
  assert.equal(client.connection.isClosed, true);
  await assert.rejects(client.connect(), (error: unknown) => error instanceof AuthError && error.closeCode === 4401);
});

test("a SEND repeated with its client_msg_id gets the first ACK; a closed client rejects requests", async () => {
  const { alice, conversationId } = await pair();
  const a = await alice.client();
  await a.connect();
  const first = await a.messages.sendText(conversationId, "once", { clientMsgId: "retry-me" });
  const again = await a.messages.sendText(conversationId, "once", { clientMsgId: "retry-me" });
  assert.deepEqual([again.message_id, again.conversation_seq], [first.message_id, first.conversation_seq]);
  const history = await a.messages.history(conversationId);
  assert.equal(history.messages.length, 1);
  a.close();
  await assert.rejects(a.messages.sendText(conversationId, "late"), (error: unknown) => error instanceof ConnectionLost);
});

test("mailbox pushes: a duplicate is dropped, a gap triggers SYNC and ends (no endless catch-up)", async () => {
  const { alice, bob, conversationId } = await pair();
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const seen = collect(b);
  await a.messages.sendText(conversationId, "one");
  await waitFor(() => seen.length === 1, "the first event");
  b.mailbox.offer(seen[0]); // a duplicate push
  const synced = b.mailbox.next("synced", 30_000);
  // A push far past the head (as if the ones between were lost): SYNC, then give up on it.
  b.mailbox.offer({ ...seen[0], mailbox_seq: seen[0].mailbox_seq + 50 });
  assert.equal((await synced).cursor, seen[0].mailbox_seq);
  await a.messages.sendText(conversationId, "two");
  await waitFor(() => seen.length === 2, "the second event");
  assert.deepEqual(texts(seen, conversationId), ["one", "two"]);
  assert.equal(seen[1].mailbox_seq, seen[0].mailbox_seq + 1);
});

test("membership over REST reaches the added user; a read on one device syncs to the other", async () => {
  const { alice, bob, conversationId } = await pair();
  const carol = await server.persona("carol");
  const carolClient = await carol.client();
  const carolSeen = collect(carolClient);
  await carolClient.connect();
  const joined = await (await alice.rest()).addMembers(conversationId, [carol.userId]);
  await waitFor(() => carolSeen.some((e) => e.control?.custom_type === "qim.membership.v1"), "carol's join event");
  const join = carolSeen.find((e) => e.control?.custom_type === "qim.membership.v1");
  assert.deepEqual(join?.control?.payload, { action: "join", user_ids: [carol.userId] });
  assert.equal(join?.control?.conversation_seq, joined.conversation_seq);

  const phone = await bob.client("phone");
  const laptop = await bob.client("laptop");
  const laptopSeen = collect(laptop);
  await phone.connect();
  await laptop.connect();
  const a = await alice.client();
  await a.connect();
  const sent = await a.messages.sendText(conversationId, "read me");
  await phone.messages.markRead(conversationId, sent.conversation_seq as number);
  await waitFor(() => laptopSeen.some((e) => e.control?.custom_type === "qim.read.v1"), "the read event on the laptop");
  const read = laptopSeen.find((e) => e.control?.custom_type === "qim.read.v1");
  assert.equal(read?.control?.read_conversation_seq, sent.conversation_seq);
  // Leaving from another device: the phone hears of it (the acting device would not).
  await (await carol.rest("tablet")).removeMember(conversationId, carol.userId);
  const actions = () => carolSeen.filter((e) => e.control?.custom_type === "qim.membership.v1").map((e) => (e.control?.payload as { action: string }).action);
  await waitFor(() => actions().length === 2, "carol's leave event");
  assert.deepEqual(actions(), ["join", "leave"]);
});

test("presence subscriptions are renewed after a reconnect", async () => {
  const { alice, bob } = await pair();
  const a = await alice.client();
  await a.connect();
  const b = await bob.client();
  await b.connect();
  await a.presence.subscribe([bob.userId]);
  assert.equal(a.presence.isOnline(bob.userId), true);
  const reconnected = a.connection.next("connected", 30_000);
  a.connection.dropSocket();
  await reconnected;
  b.close();
  await waitFor(() => a.presence.isOnline(bob.userId) === false, "bob offline, seen through the renewed subscription");
});
