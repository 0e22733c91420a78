/** The "Notify" control of a conversation: my mailbox tier (protocol §17.4). `full` notifies of
 * every message; `mention_only` only of mentions and @all, the rest arriving live while open. */
import { h } from "./dom.js";

const TIERS = { full: "all messages", mention_only: "only @mentions" };

/** A labelled select; a change is PATCHed at once, and put back if the server refuses it. */
export function tierControl(rest, conversationId, me, tier, changed) {
  const select = h("select", { id: "tier", name: "tier" },
    Object.entries(TIERS).map(([value, text]) => h("option", { value, selected: value === tier }, text)));
  let current = tier;
  select.addEventListener("change", async () => {
    const wanted = select.value;
    select.setCustomValidity("");
    select.disabled = true;
    try {
      await rest.setTier(conversationId, me, wanted);
      current = wanted;
      changed(wanted);
    } catch (failure) {
      select.value = current;
      select.setCustomValidity(failure.message || "not changed");
      select.reportValidity();
    } finally {
      select.disabled = false;
    }
  });
  // At phone width the words are hidden from sight, not from screen readers (style.css).
  return h("label", { class: "tier", title: "Which messages notify you" }, h("span", { class: "tier-label" }, "Notify: "), select);
}
