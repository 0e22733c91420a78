/** The web client's service worker (served at /sw.js, scope /): shows a notification for each
 * Web Push the server sends while this browser is offline, and opens the conversation when one
 * is clicked. It keeps no state and caches nothing: the page loads from the server as always. */

/* global self, clients */

const CALL_TAG = "call:";
const CONVERSATION_TAG = "conversation:";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(clients.claim()));

/** The push's JSON, or null for a push with no body or one that is not JSON. */
function payloadOf(event) {
  try {
    return event.data ? event.data.json() : null;
  } catch {
    return null;
  }
}

/** The notification a payload asks for: [title, options], or null when none is due (a call
 * whose ring deadline has passed: the caller has stopped ringing, so it must not ring late). */
function notificationFor(push, now = Date.now()) {
  if (!push || typeof push.conversation_id !== "string") return null;
  const data = { conversation_id: push.conversation_id, conversation_seq: push.conversation_seq ?? null };
  if (push.type === "rtc.invite") {
    if (typeof push.ring_deadline_ms === "number" && push.ring_deadline_ms <= now) return null;
    return [`Incoming call from ${push.caller_id}`, {
      body: "Open QIM to answer", tag: CALL_TAG + push.conversation_id, renotify: true, requireInteraction: true,
      data: { ...data, call_id: push.call_id },
    }];
  }
  return [push.sender_id || "QIM", {
    body: push.preview || "New message", tag: CONVERSATION_TAG + push.conversation_id, renotify: true, data,
  }];
}

self.addEventListener("push", (event) => {
  const push = payloadOf(event);
  const shown = notificationFor(push);
  const work = [];
  if (shown) work.push(self.registration.showNotification(...shown));
  if (push && typeof push.badge === "number" && self.navigator.setAppBadge) {
    work.push(self.navigator.setAppBadge(push.badge).catch(() => undefined));
  }
  event.waitUntil(Promise.all(work));
});

/** Focus an open client and tell it which conversation to show, or open one on it. */
self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const conversationId = event.notification.data?.conversation_id;
  event.waitUntil((async () => {
    const windows = await clients.matchAll({ type: "window", includeUncontrolled: true });
    const open = windows.find((client) => new URL(client.url).origin === self.location.origin);
    if (open) {
      await open.focus();
      if (conversationId) open.postMessage({ type: "open-conversation", conversation_id: conversationId });
      return;
    }
    await clients.openWindow(conversationId ? `/#conversation=${encodeURIComponent(conversationId)}` : "/");
  })());
});
