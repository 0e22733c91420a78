/**
 * The reconnect in one round trip, against a real QIM server through a recording proxy: every
 * room's ROOM_JOIN and the mailbox's SYNC leave behind AUTH before AUTH_OK, and the events
 * missed in the rooms and the group arrive once each, in order; a drop right after that write
 * is caught up by the next reconnect; a refused AUTH ends the client as it always did.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AuthError, type MailboxEvent, type QimClient, type RoomEvent } from "../src/index.js";
import { FrameProxy } from "./proxy.js";
import { QimServer, waitFor, type Persona } from "./server.js";

const server = new QimServer();
const ROOMS = 3;
// The mailbox registers its reconnect hook before the rooms do (client.ts).
const CATCH_UP = ["AUTH", "SYNC", ...Array<string>(ROOMS).fill("ROOM_JOIN")];
let rooms = 0;
let proxy: FrameProxy;

before(() => server.start());
after(() => server.stop());

interface Scene {
  a: QimClient;
  b: QimClient;
  bob: Persona;
  roomIds: string[];
  conversationId: string;
  roomTexts: Map<string, Array<[bigint, string]>>;
  groupEvents: MailboxEvent[];
}

/** alice (direct) and bob (through a fresh proxy) in ROOMS rooms and a group, each event seen once. */
async function scene(): Promise<Scene> {
  proxy = new FrameProxy(server.port);
  const url = await proxy.start();
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const { conversation_id: conversationId } = await (await alice.rest()).createConversation("group", [bob.userId]);
  const roomIds: string[] = [];
  for (let i = 0; i < ROOMS; i++) {
    const roomId = `pipe-${++rooms}`;
    await (await alice.rest()).createRoom(roomId, roomId);
    roomIds.push(roomId);
  }
  const a = await alice.client();
  const b = await bob.client("phone", { url });
  await a.connect();
  await b.connect();
  const roomTexts = new Map(roomIds.map((id) => [id, [] as Array<[bigint, string]>]));
  b.rooms.on("event", ({ room_id, event }: { room_id: string; event: RoomEvent }) => {
    roomTexts.get(room_id)?.push([event.room_seq, (event.payload as { text: string }).text]);
  });
  const groupEvents: MailboxEvent[] = [];
  b.mailbox.on("event", (event) => {
    if (event.kind === "message" && event.conversation_id === conversationId) groupEvents.push(event);
  });
  for (const roomId of roomIds) {
    await a.rooms.join(roomId);
    await b.rooms.join(roomId);
    await a.rooms.sendText(roomId, "seen");
  }
  await a.messages.sendText(conversationId, "seen");
  await waitFor(
    () => groupEvents.length === 1 && roomIds.every((id) => roomTexts.get(id)?.length === 1),
    "every first event",
  );
  return { a, b, bob, roomIds, conversationId, roomTexts, groupEvents };
}

/** Cut bob's socket and hold new ones until `proxy.release()`. */
async function away(b: QimClient): Promise<void> {
  const dropped = b.connection.next("disconnected", 30_000);
  proxy.hold();
  proxy.cut();
  await dropped;
}

function texts(events: MailboxEvent[]): string[] {
  return events.map((e) => (e.message?.payload as { text: string }).text);
}

test("a reconnect writes its whole catch-up behind AUTH; every missed event arrives once, in order", async () => {
  const { a, b, roomIds, conversationId, roomTexts, groupEvents } = await scene();
  await away(b);
  const missed = new Map<string, bigint[]>();
  for (const roomId of roomIds) {
    const seqs: bigint[] = [];
    for (const i of [0, 1]) seqs.push((await a.rooms.sendText(roomId, `missed ${i}`)).room_seq);
    missed.set(roomId, seqs);
  }
  for (const i of [0, 1, 2]) await a.messages.sendText(conversationId, `group missed ${i}`);
  const reconnected = b.connection.next("connected", 30_000);
  const synced = b.mailbox.next("synced", 30_000);
  proxy.release();
  await reconnected;
  await synced;
  await waitFor(() => roomIds.every((id) => roomTexts.get(id)?.length === 3), "the missed room events");
  for (const roomId of roomIds) {
    const seqs = missed.get(roomId) as bigint[];
    assert.deepEqual(roomTexts.get(roomId)?.slice(1), [[seqs[0], "missed 0"], [seqs[1], "missed 1"]]);
  }
  assert.deepEqual(texts(groupEvents), ["seen", "group missed 0", "group missed 1", "group missed 2"]);
  const seqs = groupEvents.map((e) => e.mailbox_seq);
  assert.deepEqual(seqs, [...new Set(seqs)].sort((x, y) => x - y));
  // Written before the server's first answer on the new socket (its AUTH_OK).
  assert.deepEqual(proxy.sockets.map((s) => s.early), [["AUTH"], CATCH_UP]);
  assert.equal(b.connection.pipelinedRequests, ROOMS + 1);
  assert.equal(b.connection.reconnects, 1);
  await new Promise((done) => setTimeout(done, 300)); // nothing more arrives
  assert.equal(groupEvents.length, 4);
  assert.ok(roomIds.every((id) => roomTexts.get(id)?.length === 3));
  proxy.stop();
});

test("a drop right after the pipelined write is caught up by the next reconnect", async () => {
  const { a, b, roomIds, conversationId, roomTexts, groupEvents } = await scene();
  await away(b);
  const seq = (await a.rooms.sendText(roomIds[0], "missed")).room_seq;
  await a.messages.sendText(conversationId, "group missed");
  proxy.cutWhenEarly = CATCH_UP.length; // the next socket dies as soon as its catch-up is written
  proxy.release();
  await waitFor(() => proxy.sockets.length === 3 && b.connection.isConnected, "a third socket");
  await waitFor(() => groupEvents.length === 2 && roomTexts.get(roomIds[0])?.length === 2, "the missed events");
  assert.deepEqual(roomTexts.get(roomIds[0])?.[1], [seq, "missed"]);
  assert.deepEqual(texts(groupEvents), ["seen", "group missed"]);
  assert.deepEqual(proxy.sockets[2].early, CATCH_UP);
  await new Promise((done) => setTimeout(done, 300));
  assert.equal(groupEvents.length, 2);
  assert.ok(roomIds.every((id, i) => roomTexts.get(id)?.length === (i === 0 ? 2 : 1)));
  proxy.stop();
});

test("a refused AUTH with requests behind it ends the client as a refused reconnect does", async () => {
  const { a, b, bob, roomIds, conversationId, roomTexts, groupEvents } = await scene();
  await away(b);
  await (await bob.rest("phone")).logout(); // revokes the token bob's client holds
  await a.rooms.sendText(roomIds[0], "never seen");
  await a.messages.sendText(conversationId, "never seen");
  const closed = b.connection.next("closed", 30_000);
  proxy.release();
  const final = await closed;
  assert.ok(final.error instanceof AuthError, String(final.error));
  assert.equal(final.error.closeCode, 4401);
  assert.equal(b.connection.isClosed, true);
  assert.equal(b.connection.reconnects, 0);
  assert.deepEqual(proxy.sockets[1].early, CATCH_UP);
  assert.equal(groupEvents.length, 1);
  assert.ok(roomIds.every((id) => roomTexts.get(id)?.length === 1));
  proxy.stop();
});
