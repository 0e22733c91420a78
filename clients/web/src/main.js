/** The web client's entry: the login form, then the chat (chat.js) on the SDK's session. */
import "./style.css";
import { QimClient, RestClient, StorageCursorStore } from "../../js/src/index.ts";
import { Chat } from "./chat.js";
import { h } from "./dom.js";
import { Notifications } from "./notifications.js";

const app = document.getElementById("app");
const DEVICE_KEY = "qim.device_id";
const SESSION_KEY = "qim.session";

/** One device id per browser profile, kept so logins reuse it (one device row, one cursor). */
function deviceId() {
  let id = localStorage.getItem(DEVICE_KEY);
  if (!id) {
    const bytes = crypto.getRandomValues(new Uint8Array(6));
    id = "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

function showLogin(message = "") {
  const error = h("p", { class: "error", id: "login-error", role: "alert" }, message);
  const form = h("form", { id: "login", class: "login" },
    h("h1", {}, "QIM"),
    h("label", {}, "Tenant", h("input", { name: "tenant", autocomplete: "organization", required: true })),
    h("label", {}, "User", h("input", { name: "username", autocomplete: "username", required: true })),
    h("label", {}, "Password", h("input", { name: "password", type: "password", autocomplete: "current-password", required: true })),
    h("button", { type: "submit" }, "Log in"),
    error);
  form.addEventListener("submit", async (submit) => {
    submit.preventDefault();
    const fields = Object.fromEntries(new FormData(form));
    try {
      const answer = await new RestClient(location.origin).login(fields.tenant, fields.username, fields.password, deviceId());
      // The token lives as long as the tab: sessionStorage, never localStorage.
      sessionStorage.setItem(SESSION_KEY, JSON.stringify({ tenant: fields.tenant, userId: answer.user_id, token: answer.token }));
      start();
    } catch (failure) {
      error.textContent = failure.message || "login failed";
    }
  });
  app.replaceChildren(form);
}

function start() {
  const session = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
  if (!session) return showLogin();
  const id = deviceId();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const client = new QimClient({
    url: `${scheme}//${location.host}/ws/v1`, token: session.token, deviceId: id,
    cursorStore: new StorageCursorStore(sessionStorage, `qim.cursor.${session.tenant}.${session.userId}.${id}`),
  });
  const rest = new RestClient(location.origin, session.token);
  let ended = false;
  const logout = (message) => {
    if (ended) return;
    ended = true;
    client.close();
    sessionStorage.removeItem(SESSION_KEY);
    showLogin(message);
  };
  client.connection.on("closed", (info) => logout(info?.error?.message || "signed out"));
  const notifications = new Notifications(rest, id);
  // "Log out" revokes the token on the server (DELETE auth/token), so a copy of it is useless;
  // it turns notifications off first, so the next person at this browser gets none of them.
  const signOut = async () => {
    if (notifications.state === "enabled") await notifications.disable();
    rest.logout().catch(() => undefined);
    logout("");
  };
  const chat = new Chat(app, client, rest, session, signOut, notifications);
  // A clicked notification names its conversation: in a message from the service worker to an
  // open tab, or in the address of a tab it opened (#conversation=<id>).
  navigator.serviceWorker?.addEventListener("message", (event) => {
    if (event.data?.type === "open-conversation") chat.openConversation(event.data.conversation_id);
  });
  chat.start().then(async () => {
    const wanted = new URLSearchParams(location.hash.slice(1)).get("conversation");
    if (wanted) {
      history.replaceState(null, "", location.pathname);
      await chat.refreshList(); // its title and kind, before the pane is drawn
      await chat.openConversation(wanted);
    }
  });
  notifications.start().catch(() => notifications.show("off"));
}

start();
