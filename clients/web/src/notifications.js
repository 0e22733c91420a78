/** "Enable notifications": the Push API subscription of this browser, registered with the
 * server for this device, so messages and calls reach it while no tab is open. */
import { h } from "./dom.js";

const WORKER_URL = "/sw.js";
const LABELS = {
  checking: "Notifications: checking…",
  off: "Notifications are off",
  enabled: "Notifications are on",
  blocked: "Notifications are blocked in this browser's site settings",
  unsupported: "This browser cannot receive notifications",
  unconfigured: "Notifications are not configured on this server",
  failed: "Notifications could not be enabled",
};

/** base64url (the server's VAPID key) to the bytes `applicationServerKey` takes. */
function keyBytes(base64url) {
  const base64 = base64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (base64url.length % 4)) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function sameKey(buffer, bytes) {
  if (!buffer) return false;
  const have = new Uint8Array(buffer);
  return have.length === bytes.length && have.every((b, i) => b === bytes[i]);
}

export function pushSupported() {
  return "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
}

export class Notifications {
  constructor(rest, deviceId) {
    Object.assign(this, { rest, deviceId });
    this.label = h("span", { id: "notifications-state", class: "status" });
    this.button = h("button", { id: "notifications-toggle", type: "button", onclick: () => this.toggle() });
    this.element = h("div", { id: "notifications", class: "notifications" }, this.label, this.button);
    this.show("checking");
  }

  /** Shows the current state; a subscription the browser still holds is registered again,
   * since the server forgets one its push service called gone. */
  async start() {
    if (!pushSupported()) return this.show("unsupported");
    if (Notification.permission === "denied") return this.show("blocked");
    const registration = await navigator.serviceWorker.getRegistration("/");
    const subscription = await registration?.pushManager.getSubscription();
    if (!subscription || Notification.permission !== "granted") return this.show("off");
    try {
      await this.rest.setWebPushSubscription(this.deviceId, subscription.toJSON());
      this.show("enabled");
    } catch {
      this.show("off");
    }
  }

  show(state, detail = "") {
    this.state = state;
    this.element.dataset.state = state;
    this.label.textContent = detail ? `${LABELS[state]}: ${detail}` : LABELS[state];
    this.button.textContent = state === "enabled" ? "Disable notifications" : "Enable notifications";
    this.button.hidden = ["checking", "unsupported", "blocked"].includes(state);
  }

  toggle() {
    this.button.disabled = true;
    const work = this.state === "enabled" ? this.disable() : this.enable();
    return work.finally(() => { this.button.disabled = false; });
  }

  /** The server's key (no prompt where the server cannot push), permission, the service
   * worker, the subscription, then the server. */
  async enable() {
    if (!pushSupported()) return this.show("unsupported");
    let key;
    try {
      key = keyBytes(await this.rest.vapidPublicKey());
    } catch (failure) {
      return this.show(failure.status === 404 ? "unconfigured" : "failed", failure.status === 404 ? "" : failure.message);
    }
    const permission = await Notification.requestPermission();
    if (permission === "denied") return this.show("blocked");
    if (permission !== "granted") return this.show("off");
    try {
      await navigator.serviceWorker.register(WORKER_URL, { scope: "/" });
      const registration = await navigator.serviceWorker.ready;
      let subscription = await registration.pushManager.getSubscription();
      // A subscription made with another server key (the operator rotated it) cannot be used.
      if (subscription && !sameKey(subscription.options?.applicationServerKey, key)) {
        await subscription.unsubscribe();
        subscription = null;
      }
      subscription ??= await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
      await this.rest.setWebPushSubscription(this.deviceId, subscription.toJSON());
      this.show("enabled");
    } catch (failure) {
      this.show("failed", failure.message || String(failure));
    }
  }

  /** The browser drops its subscription and the server forgets it for this device. */
  async disable() {
    try {
      const registration = await navigator.serviceWorker.getRegistration("/");
      const subscription = await registration?.pushManager.getSubscription();
      await subscription?.unsubscribe();
      await this.rest.unregisterPush(this.deviceId);
      this.show("off");
    } catch (failure) {
      this.show("failed", failure.message || String(failure));
    }
  }
}
