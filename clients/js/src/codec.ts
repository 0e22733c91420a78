/**
 * Frame (de)serialization without losing 64-bit integers (protocol §1: `room_seq` is an exact
 * 64-bit integer; `JSON.parse` would round 2^53 + 1 to 2^53).
 *
 * Why lossless-json: it is maintained, typed, ESM, has no dependencies and runs in browsers;
 * it hands every number to us as its source text, so nothing is rounded before we decide.
 * (json-bigint has had no release since 2020; `JSON.parse` with the reviver's `source`
 * argument is not in Node 20.)
 *
 * The rule: room positions (ROOM_SEQ_FIELDS) are always `bigint`, whatever their size, so
 * application code never mixes the two types for one field. Any other integer is a `number`
 * when it is safe and a `bigint` when it is not (never rounded). Non-integers are numbers.
 */
import { isInteger, isSafeNumber, LosslessNumber, parse, stringify } from "lossless-json";

import type { Frame } from "./types.js";

/** Fields that carry room positions: always decoded as `bigint`. */
export const ROOM_SEQ_FIELDS: ReadonlySet<string> = new Set([
  "room_seq",
  "latest_room_seq",
  "earliest_replay_room_seq",
  "after_room_seq",
]);

function reviveNumber(key: string, value: unknown): unknown {
  if (!(value instanceof LosslessNumber)) return value;
  const text = value.value;
  if (isInteger(text)) {
    if (ROOM_SEQ_FIELDS.has(key) || !isSafeNumber(text)) return BigInt(text);
    return Number(text);
  }
  return Number(text);
}

/** Parses any JSON text by the rule above; throws SyntaxError on malformed text. */
export function parseJson(text: string): unknown {
  return parse(text, reviveNumber);
}

/** Compact JSON; `bigint` values are written as exact integer literals. */
export function stringifyJson(value: unknown): string {
  const text = stringify(value);
  if (text === undefined) throw new TypeError("value cannot be serialized as JSON");
  return text;
}

/** One frame from a WebSocket message; null for anything that is not a JSON object. */
export function decodeFrame(message: string): Frame | null {
  let value: unknown;
  try {
    value = parseJson(message);
  } catch {
    return null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
  if (typeof (value as { type?: unknown }).type !== "string") return null;
  return value as Frame;
}

/** Serializes a frame to send. */
export function encodeFrame(frame: object): string {
  return stringifyJson(frame);
}

/** A room position from a string, number or bigint; throws on anything inexact. */
export function toRoomSeq(value: bigint | number | string): bigint {
  if (typeof value === "number" && !Number.isSafeInteger(value)) {
    throw new RangeError(`room_seq ${value} is not an exact integer; pass a bigint or a string`);
  }
  return BigInt(value);
}

/** `room_seq = (room_epoch << 48) | counter` (protocol §8). */
export const EPOCH_SHIFT = 48n;

export function epochOf(roomSeq: bigint): bigint {
  return roomSeq >> EPOCH_SHIFT;
}

export function counterOf(roomSeq: bigint): bigint {
  return roomSeq & ((1n << EPOCH_SHIFT) - 1n);
}
