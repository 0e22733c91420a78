/** The codec keeps 64-bit integers exact; the backoff is capped and jittered. No server needed. */
import assert from "node:assert/strict";
import { test } from "node:test";

import * as moduleUnderTest from "../src/index.js";
import { Backoff, counterOf, decodeFrame, encodeFrame, epochOf, parseJson, toRoomSeq } from "../src/index.js";

const BIG = "9223372036854775807"; // 2^63 - 1: JSON.parse rounds it to 9223372036854775808

test("a room_seq above 2^53 survives decode and encode exactly", () => {
  const text = `{"type":"ROOM_BATCH","room_id":"r","room_epoch":32767,"latest_room_seq":${BIG},` +
    `"earliest_replay_room_seq":null,"replay_truncated":false,` +
    `"events":[{"room_seq":9007199254740993,"message_id":"m","sender_id":"a","content_type":"text","payload":{"text":"x"},"sent_at_ms":1}]}`;
  assert.notEqual(String(JSON.parse(text).latest_room_seq), BIG, "the trap this codec exists for");
  const frame = decodeFrame(text) as Record<string, any>;
  assert.equal(frame.latest_room_seq, BigInt(BIG));
  assert.equal(frame.events[0].room_seq, 9007199254740993n);
  assert.equal(frame.earliest_replay_room_seq, null);
  assert.equal(typeof frame.room_epoch, "number");
  assert.equal(frame.events[0].sent_at_ms, 1);
  const again = encodeFrame(frame);
  assert.ok(again.includes(`"latest_room_seq":${BIG}`), again);
  assert.ok(again.includes(`"room_seq":9007199254740993`), again);
});

test("room positions are bigint even when small; other safe integers stay numbers", () => {
  const frame = decodeFrame('{"type":"ACK","room_seq":281474976710657,"conversation_seq":3,"ratio":0.5}') as Record<string, any>;
  assert.equal(frame.room_seq, 281474976710657n);
  assert.equal(frame.conversation_seq, 3);
  assert.equal(frame.ratio, 0.5);
});

test("an unsafe integer anywhere (a payload) becomes a bigint, never a rounded number", () => {
  const value = parseJson('{"payload":{"id":12345678901234567890,"n":7}}') as any;
  assert.equal(value.payload.id, 12345678901234567890n);
  assert.equal(value.payload.n, 7);
});

test("frames that are not JSON objects with a type decode to null", () => {
  for (const bad of ["{not json", "[1,2]", '"x"', "null", '{"no":"type"}']) assert.equal(decodeFrame(bad), null, bad);
});

test("toRoomSeq refuses an inexact number; epoch and counter split a room_seq", () => {
  assert.throws(() => toRoomSeq(2 ** 60), RangeError);
  assert.equal(toRoomSeq("9007199254740993"), 9007199254740993n);
  const seq = (41n << 48n) | 7n;
  assert.equal(epochOf(seq), 41n);
  assert.equal(counterOf(seq), 7n);
});

test("backoff grows, is capped, and jitter only shortens it", () => {
  const exact = new Backoff({ initialMs: 100, maximumMs: 1000, jitter: 0 });
  assert.deepEqual([0, 1, 2, 3, 4, 100].map((n) => exact.delayMs(n)), [100, 200, 400, 800, 1000, 1000]);
  const jittered = new Backoff({ initialMs: 100, maximumMs: 1000, jitter: 0.5, random: () => 0.999 });
  const delay = jittered.delayMs(3);
  assert.ok(delay > 400 && delay < 800, String(delay));
});

test("the browser bundle imports nothing from Node and decodes room_seq as bigint", async () => {
  const { readFileSync } = await import("node:fs");
  const { fileURLToPath } = await import("node:url");
  const bundleUrl = new URL("../../dist/qim-client.browser.js", import.meta.url);
  const text = readFileSync(fileURLToPath(bundleUrl), "utf-8");
  assert.doesNotMatch(text, /^\s*import[\s{*]/m, "a self-contained bundle imports nothing");
  assert.doesNotMatch(text, /\brequire\(["']|["']node:/);
  const bundle = await import(bundleUrl.href);
  assert.equal(bundle.decodeFrame(`{"type":"ACK","room_seq":${BIG}}`).room_seq, BigInt(BIG));
  assert.equal(typeof bundle.QimClient, "function");
});

test("without a WebSocket class (Node 20 has no global one) the client says what to pass", () => {
  const { QimConnection } = moduleUnderTest;
  const hadGlobal = "WebSocket" in globalThis;
  if (hadGlobal) return assert.ok(new QimConnection({ url: "ws://x", token: "t", deviceId: "d" }));
  assert.throws(() => new QimConnection({ url: "ws://x", token: "t", deviceId: "d" }), /pass one/);
});
