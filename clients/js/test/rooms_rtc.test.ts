/**
 * Rooms, the registry, RTC and REST against a real QIM server: a room whose room_seq is above
 * 2^53 kept exact as bigint over WebSocket and REST, replay after a dropped socket,
 * replay_truncated with its reason, a placeholder for an unknown custom type, a call invited,
 * accepted and hung up between two clients, and the REST paths checked against the schema.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  Backoff, epochOf, REST_PATHS, RestClient, type Call, type ConversationIdAnswer, type ConversationInfo,
  type ConversationSeqAnswer, type CustomMessageType, type EventSeqAnswer, type GroupMember, type GroupUpdateAnswer,
  type IceServer, type IceServers, type LoginAnswer, type MemberChangeAnswer, type MemberPage, type RoomEvent,
  type UserIdAnswer,
} from "../src/index.js";
import { QimServer, waitFor, type Persona } from "./server.js";

const server = new QimServer();
const EPOCH = 41n; // the server will take the room at 40 + 1: (41 << 48) | 1 > 2^53
let rooms = 0;

before(() => server.start());
after(() => server.stop());

function texts(events: RoomEvent[]): string[] {
  return events.map((e) => (e.payload as { text: string }).text);
}

async function bigRoom(owner: Persona): Promise<string> {
  const roomId = `big-${++rooms}`;
  await (await owner.rest()).createRoom(roomId, "big");
  server.sql(`UPDATE rooms_room SET room_epoch = ${EPOCH - 1n} WHERE room_id = '${roomId}'`);
  return roomId;
}

test("a room_seq above 2^53 stays an exact bigint end to end (WebSocket and REST)", async () => {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const roomId = await bigRoom(alice);
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const joined = await a.rooms.join(roomId);
  assert.equal(joined.room_epoch, Number(EPOCH));
  await b.rooms.join(roomId);
  const got: RoomEvent[] = [];
  b.rooms.on("event", ({ room_id, event }) => room_id === roomId && got.push(event));
  const acks = [];
  for (const text of ["x", "y", "z"]) acks.push(await a.rooms.sendText(roomId, text));
  const expected = [1n, 2n, 3n].map((n) => (EPOCH << 48n) | n);
  assert.deepEqual(acks.map((ack) => ack.room_seq), expected);
  assert.ok(expected[0] > BigInt(Number.MAX_SAFE_INTEGER));
  await waitFor(() => got.length === 3, "3 room events");
  assert.deepEqual(got.map((e) => e.room_seq), expected);
  assert.equal(typeof got[0].room_seq, "bigint");
  assert.equal(epochOf(got[2].room_seq), EPOCH);
  assert.equal(b.rooms.joined.get(roomId)?.last_room_seq, expected[2]);

  const info = await (await alice.rest()).getRoom(roomId);
  assert.equal(info.latest_room_seq, expected[2]);

  // A replay from an exact big position returns exactly what followed it.
  const c = await bob.client("tablet");
  await c.connect();
  const replayed: RoomEvent[] = [];
  c.rooms.on("event", ({ event }) => replayed.push(event));
  await c.rooms.join(roomId, expected[0]);
  assert.deepEqual(replayed.map((e) => e.room_seq), expected.slice(1));
});

test("after a dropped socket the client rejoins and replays from its last room_seq", async () => {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const roomId = await bigRoom(alice);
  const a = await alice.client();
  const b = await bob.client("phone", { backoff: new Backoff({ initialMs: 1500, jitter: 0 }) });
  await a.connect();
  await b.connect();
  await a.rooms.join(roomId);
  await b.rooms.join(roomId);
  const got: RoomEvent[] = [];
  b.rooms.on("event", ({ event }) => got.push(event));
  await a.rooms.sendText(roomId, "before");
  await waitFor(() => got.length === 1, "the first room event");
  const dropped = b.connection.next("disconnected", 30_000);
  b.connection.dropSocket();
  await dropped;
  for (const text of ["during 1", "during 2"]) await a.rooms.sendText(roomId, text);
  await b.connection.next("connected", 30_000);
  await a.rooms.sendText(roomId, "after");
  await waitFor(() => got.length === 4, "4 room events");
  assert.deepEqual(texts(got), ["before", "during 1", "during 2", "after"]);
  const seqs = got.map((e) => e.room_seq);
  assert.deepEqual(seqs, [...seqs].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)));
});

test("replay_truncated is surfaced with its reason: epoch_changed, ahead", async () => {
  const alice = await server.persona("alice");
  const roomId = await bigRoom(alice);
  const a = await alice.client();
  await a.connect();
  const truncations: string[] = [];
  a.rooms.on("truncated", ({ reason }) => truncations.push(reason));
  await a.rooms.join(roomId);
  await a.rooms.sendText(roomId, "one");
  await a.rooms.leave(roomId);

  const older = ((EPOCH - 1n) << 48n) | 5n;
  const batch = await a.rooms.join(roomId, older);
  assert.equal(batch.replay_truncated, true);
  assert.equal(batch.replay_truncated_reason, "epoch_changed");
  assert.deepEqual(batch.events, []);
  assert.equal(a.rooms.joined.get(roomId)?.last_room_seq, (EPOCH << 48n) | 1n, "jumped to the head");
  await a.rooms.leave(roomId);

  const ahead = (EPOCH << 48n) | 1000n;
  const aheadBatch = await a.rooms.join(roomId, ahead);
  assert.equal(aheadBatch.replay_truncated_reason, "ahead");
  assert.deepEqual(truncations, ["epoch_changed", "ahead"]);
});

test("the registry follows REGISTRY_UPDATED; an unknown type renders as a placeholder", async () => {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const { conversation_id } = await (await alice.rest()).createConversation("group", [bob.userId]);
  const a = await alice.client();
  const tracking = await bob.client("phone");
  const blind = await bob.client("old-app", { trackRegistry: false });
  await a.connect();
  await tracking.connect();
  await blind.connect();
  const customType = `acme.poll${++rooms}.v1`;
  const admin = new RestClient(server.httpUrl, server.adminToken);
  await admin.createType({ custom_type: customType, preview_template: "[poll by {sender_id}]" });
  await waitFor(() => tracking.registry.get(customType) !== undefined, "REGISTRY_UPDATED refresh");
  assert.ok(tracking.registry.version > 6);

  const seenTracking: string[] = [];
  const seenBlind: string[] = [];
  tracking.mailbox.on("event", (e) => e.message && seenTracking.push(`${e.message.render?.kind}:${e.message.render?.fallback_text}`));
  blind.mailbox.on("event", (e) => e.message && seenBlind.push(`${e.message.render?.kind}:${e.message.render?.fallback_text}`));
  await a.messages.send(conversation_id, customType, { question: "lunch?" });
  await waitFor(() => seenTracking.length === 1 && seenBlind.length === 1, "both devices' events");
  assert.deepEqual(seenTracking, [`custom:[poll by ${alice.userId}]`]);
  assert.deepEqual(seenBlind, [`placeholder:[poll by ${alice.userId}]`]);

  const disabled = await admin.disableType(customType);
  assert.equal(disabled.enabled, false);
  await waitFor(() => tracking.registry.get(customType)?.enabled === false, "the disabled type refreshed");
  assert.equal(tracking.registry.render(customType, {}, "[poll]").kind, "custom", "disabled types keep rendering");
});

test("RTC: invite, accept, hangup between two clients; the call record lands in HISTORY", async () => {
  const alice = await server.persona("alice");
  const bob = await server.persona("bob");
  const { conversation_id } = await (await alice.rest()).createConversation("direct", [bob.userId]);
  const a = await alice.client();
  const b = await bob.client();
  await a.connect();
  await b.connect();
  const aliceStates: string[] = [];
  const bobStates: string[] = [];
  a.calls.on("state", (call) => aliceStates.push(call.state));
  b.calls.on("state", (call) => bobStates.push(call.state));
  const incoming = b.calls.next("signal", 30_000, ({ signal }) => signal.action === "invite");
  const call: Call = await a.calls.invite(conversation_id, bob.userId, { media: "audio" });
  assert.equal(call.state, "ringing");
  const { call: bobsCall } = await incoming;
  assert.equal(bobsCall.call_id, call.call_id);
  assert.equal(bobsCall.peer_user_id, alice.userId);
  const accepted = a.calls.next("signal", 30_000, ({ signal }) => signal.action === "accept");
  assert.equal((await b.calls.accept(call.call_id)).state, "accepted");
  await accepted;
  assert.equal(a.calls.calls.get(call.call_id)?.state, "accepted");
  await a.calls.sdp(call.call_id, { type: "offer", sdp: "v=0" });
  const hungUp = b.calls.next("signal", 30_000, ({ signal }) => signal.action === "hangup");
  assert.equal((await a.calls.hangup(call.call_id)).state, "completed");
  await hungUp;
  assert.deepEqual(aliceStates, ["accepted", "completed"]);
  assert.deepEqual(bobStates, ["accepted", "completed"]);

  const history = await a.messages.history(conversation_id);
  const record = history.messages.find((m) => m.content_type === "qim.call_record.v1");
  assert.equal((record?.payload as { outcome: string; call_id: string }).outcome, "completed");
  assert.equal((record?.payload as { call_id: string }).call_id, call.call_id);
});

test("REST: every path the client calls is in /api/v1/schema/; errors carry {code, message}", async () => {
  const response = await fetch(`${server.httpUrl}/api/v1/schema/?format=json`, { headers: { Accept: "application/json" } });
  assert.equal(response.status, 200);
  const schema = (await response.json()) as { paths: Record<string, unknown> };
  const shape = (path: string) => path.replace(/\{[^}]+\}/g, "{}");
  const served = new Set(Object.keys(schema.paths).map(shape));
  const missing = REST_PATHS.map(shape).filter((path) => !served.has(path));
  assert.deepEqual(missing, []);
  // The hand-written answer types have exactly the schema's fields (tsc checks each list
  // against its interface: a missing or extra key does not compile).
  const tokenResponse: Record<keyof LoginAnswer, true> = { token: true, user_id: true, expires_at_ms: true };
  const userId: Record<keyof UserIdAnswer, true> = { user_id: true };
  const conversationId: Record<keyof ConversationIdAnswer, true> = { conversation_id: true };
  const conversationSeq: Record<keyof ConversationSeqAnswer, true> = { conversation_seq: true };
  const eventSeq: Record<keyof EventSeqAnswer, true> = { event_conversation_seq: true };
  const iceServers: Record<keyof IceServers, true> = { ice_servers: true, ttl_s: true };
  const iceServer: Record<keyof IceServer, true> = { urls: true, username: true, credential: true };
  const customType: Record<keyof CustomMessageType, true> = {
    custom_type: true, schema_version: true, delivery_class: true, counts_unread: true, affects_session_order: true,
    timeline_visible: true, anchor_mode: true, preview_template: true, max_payload_bytes: true,
    minimum_client_version: true, enabled: true, version: true,
  };
  // GET and PATCH conversations/{id} share one component: the union of the two answers.
  const conversationSettings: Record<keyof ConversationInfo | keyof GroupUpdateAnswer, true> = {
    conversation_id: true, kind: true, title: true, mention_all_policy: true, add_members_policy: true,
    member_count: true, role: true, tier: true, member: true, conversation_seq: true,
  };
  const memberChange: Record<keyof MemberChangeAnswer, true> = { user_id: true, role: true, tier: true, conversation_seq: true };
  const memberItem: Record<keyof GroupMember, true> = { user_id: true, display_name: true, role: true };
  const memberPage: Record<keyof MemberPage, true> = { members: true, next: true };
  const components = (schema as unknown as { components: { schemas: Record<string, { properties: object }> } }).components.schemas;
  const ours: Record<string, object> = {
    TokenResponse: tokenResponse, UserId: userId, ConversationId: conversationId, ConversationSeq: conversationSeq,
    EventSeq: eventSeq, IceServers: iceServers, IceServer: iceServer, CustomMessageType: customType,
    ConversationSettings: conversationSettings, MemberChange: memberChange, MemberItem: memberItem, MemberPage: memberPage,
  };
  for (const [name, keys] of Object.entries(ours)) {
    assert.deepEqual(Object.keys(components[name].properties).sort(), Object.keys(keys).sort(), name);
  }
  // DELETE registry/types/{custom_type} answers 200 with the disabled type (§13.3).
  const deleteOp = (schema.paths["/api/v1/registry/types/{custom_type}"] as Record<string, { responses: object }>).delete;
  // (its error statuses are declared too: only the success answer is checked here).
  const successes = Object.keys(deleteOp.responses).filter((code) => code.startsWith("2"));
  assert.deepEqual(successes, ["200"]);

  const alice = await server.persona("alice");
  const rest = await alice.rest();
  await assert.rejects(rest.getRoom("no-such-room"), (error: any) => error.status === 404 && error.code === "not_found");
  const ice = await rest.iceServers();
  assert.deepEqual(ice.ice_servers, []);
  await rest.registerPush("phone", { platform: "android", push_token: "t" });
  await rest.unregisterPush("phone");
});

test("a server restart moves the room to a new epoch: rejoin reports epoch_changed, never a seq going back", async () => {
  const alice = await server.persona("alice");
  const roomId = await bigRoom(alice);
  const a = await alice.client();
  await a.connect();
  await a.rooms.join(roomId);
  const got: bigint[] = [];
  const truncations: string[] = [];
  const epochs: number[] = [];
  a.rooms.on("event", ({ event }) => got.push(event.room_seq));
  a.rooms.on("truncated", ({ reason }) => truncations.push(reason));
  a.rooms.on("epoch", ({ room_epoch }) => epochs.push(room_epoch));
  await a.rooms.sendText(roomId, "old epoch");
  await waitFor(() => got.length === 1, "the first event");
  const reconnected = a.connection.next("connected", 60_000);
  await server.restart();
  await reconnected;
  assert.deepEqual(truncations, ["epoch_changed"]);
  assert.deepEqual(epochs, [Number(EPOCH) + 1]);
  const ack = await a.rooms.sendText(roomId, "new epoch");
  assert.equal(epochOf(ack.room_seq), EPOCH + 1n);
  await waitFor(() => got.length === 2, "the new epoch's event");
  assert.deepEqual(got, [(EPOCH << 48n) | 1n, ((EPOCH + 1n) << 48n) | 1n]);
});
