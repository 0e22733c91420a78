/**
 * Web Push over REST against real QIM servers: the VAPID public key a browser subscribes
 * with (the server's own key, as `applicationServerKey` wants it; not_found where Web Push is
 * not configured), a subscription stored for the device and forgotten again, and the
 * endpoints the server refuses to fetch (its SSRF check).
 */
import assert from "node:assert/strict";
import { createECDH, generateKeyPairSync, randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { RestError, type WebPushSubscriptionJson } from "../src/index.js";
import { QimServer } from "./server.js";

const PUSH_HOST = "push.example.test";
const vapid = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
const server = new QimServer({
  QIM_VAPID_PRIVATE_KEY: vapid.privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
  QIM_VAPID_SUBJECT: "mailto:ops@example.test",
  QIM_WEB_PUSH_ENDPOINT_HOSTS: `${PUSH_HOST},*.push.example.test`,
});
const unconfigured = new QimServer();

before(async () => {
  await server.start();
  await unconfigured.start();
});
after(async () => {
  await server.stop();
  await unconfigured.stop();
});

function b64url(bytes: Buffer): string {
  return bytes.toString("base64url");
}

/** What a browser's PushSubscription.toJSON() gives: a P-256 point and a 16-byte secret. */
function subscription(endpoint: string): WebPushSubscriptionJson {
  const ecdh = createECDH("prime256v1");
  ecdh.generateKeys();
  return { endpoint, expirationTime: null, keys: { p256dh: b64url(ecdh.getPublicKey()), auth: b64url(randomBytes(16)) } };
}

function storedPush(userId: string, deviceId: string): [string, string] {
  const rows = server.query(
    `SELECT d.push_platform, d.push_token FROM qim_device d JOIN qim_user u ON u.id = d.user_id
     WHERE u.username = '${userId}' AND d.device_id = '${deviceId}'`,
  );
  assert.equal(rows.length, 1);
  return rows[0] as [string, string];
}

test("vapidPublicKey() is the server's VAPID public point, base64url as applicationServerKey wants it", async () => {
  const rest = await (await server.persona("alice")).rest("browser");
  const key = await rest.vapidPublicKey();
  const jwk = vapid.publicKey.export({ format: "jwk" });
  const point = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x as string, "base64url"), Buffer.from(jwk.y as string, "base64url")]);
  assert.equal(key, b64url(point));
  assert.match(key, /^[A-Za-z0-9_-]{87}$/);
});

test("vapidPublicKey() where Web Push is not configured: RestError 404 not_found", async () => {
  const rest = await (await unconfigured.persona("alice")).rest("browser");
  await assert.rejects(rest.vapidPublicKey(), (error: unknown) =>
    error instanceof RestError && error.status === 404 && error.code === "not_found");
});

test("setWebPushSubscription() stores the subscription for the device; unregisterPush() forgets it", async () => {
  const alice = await server.persona("alice");
  const rest = await alice.rest("browser");
  const sub = subscription(`https://${PUSH_HOST}/send/abc123`);
  assert.deepEqual(await rest.setWebPushSubscription("browser", sub), { device_id: "browser", platform: "web" });
  const [platform, token] = storedPush(alice.userId, "browser");
  assert.equal(platform, "web");
  assert.deepEqual(JSON.parse(token), { endpoint: sub.endpoint, keys: sub.keys }); // expirationTime is not kept

  // A new subscription (the browser's key rotated) replaces the old one.
  const renewed = subscription(`https://eu.push.example.test/send/def456`);
  await rest.setWebPushSubscription("browser", renewed);
  assert.equal(JSON.parse(storedPush(alice.userId, "browser")[1]).endpoint, renewed.endpoint);

  await rest.unregisterPush("browser");
  assert.deepEqual(storedPush(alice.userId, "browser"), ["", ""]);
});

test("setWebPushSubscription() refuses endpoints the server must not fetch, and keys RFC 8291 cannot use", async () => {
  const alice = await server.persona("alice");
  const rest = await alice.rest("browser");
  const good = subscription(`https://${PUSH_HOST}/send/ok`);
  const refused = [
    { ...good, endpoint: `http://${PUSH_HOST}/send/plain-http` },
    { ...good, endpoint: "https://169.254.169.254/latest/meta-data" },
    { ...good, endpoint: `https://${PUSH_HOST}.evil.example/send/x` },
    { ...good, keys: { ...good.keys, p256dh: b64url(Buffer.concat([Buffer.from([2]), randomBytes(64)])) /* not an uncompressed point */ } },
    { ...good, keys: { ...good.keys, auth: b64url(randomBytes(8)) } },
  ];
  for (const bad of refused) {
    await assert.rejects(rest.setWebPushSubscription("browser", bad), (error: unknown) =>
      error instanceof RestError && error.status === 400 && error.code === "bad_request", JSON.stringify(bad));
  }
  assert.deepEqual(storedPush(alice.userId, "browser"), ["", ""]);
  // Another user's device answers like one that does not exist.
  const bob = await server.persona("bob");
  await bob.token("laptop");
  await assert.rejects(rest.setWebPushSubscription("laptop", good), (error: unknown) =>
    error instanceof RestError && error.status === 404 && error.code === "not_found");
});
