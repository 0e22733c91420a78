/**
 * The device's mailbox stream (protocol §15): SYNC from the stored cursor on every connect,
 * paging on `has_more`, then live EVENTs; a gap in `mailbox_seq` means "SYNC now", a seq at
 * or below the cursor is a duplicate. Events come out once each, ascending. A live EVENT (no
 * `mailbox_seq`, §6.5) is in no mailbox: it goes out as `live` at once and never moves the cursor.
 */
import type { QimConnection } from "./connection.js";
import { Emitter } from "./emitter.js";
import type { Frame, LiveEvent, MailboxEvent, SyncBatch } from "./types.js";

/** Where a device keeps its cursor between runs: one per (server, user, device). */
export interface CursorStore {
  load(): number | undefined;
  save(mailboxSeq: number): void;
}

export class MemoryCursorStore implements CursorStore {
  constructor(private value?: number) {}
  load(): number | undefined {
    return this.value;
  }
  save(mailboxSeq: number): void {
    this.value = mailboxSeq;
  }
}

/** A browser store: `localStorage` (or any Storage) under one key. */
export class StorageCursorStore implements CursorStore {
  constructor(private readonly storage: Pick<Storage, "getItem" | "setItem">, private readonly key: string) {}
  load(): number | undefined {
    const value = Number(this.storage.getItem(this.key));
    return Number.isSafeInteger(value) && value > 0 ? value : undefined;
  }
  save(mailboxSeq: number): void {
    this.storage.setItem(this.key, String(mailboxSeq));
  }
}

/** SYNC passes one catch-up makes to fill a gap that pushes revealed. */
const MAX_GAP_PASSES = 2;

export interface MailboxEvents {
  [name: string]: unknown;
  event: MailboxEvent;
  /** A row that wrote no entry in this mailbox (you are `mention_only` there, §17.4): show it if
   * its conversation is open; SYNC will not bring it again, HISTORY has it. */
  live: LiveEvent;
  /** A catch-up finished: the cursor is at the mailbox's head as of that SYNC. */
  synced: { cursor: number; events: number };
  /** A SYNC page said `history_truncated`: retention deleted entries after `after` (§6.2). */
  historyTruncated: { after: number };
}

export class MailboxSync extends Emitter<MailboxEvents> {
  cursor: number;
  private syncing: Promise<void> | null = null;
  private again = false;
  private held: MailboxEvent[] = [];

  constructor(
    private readonly connection: QimConnection,
    readonly store: CursorStore = new MemoryCursorStore(),
    private readonly pageSize = 200,
    /** Applied to each event before it is emitted (the registry's render decision). */
    private readonly prepare: (event: MailboxEvent | LiveEvent) => void = () => undefined,
  ) {
    super();
    this.cursor = store.load() ?? 0;
    connection.on("push", (frame: Frame) => {
      if (frame.type === "EVENT") this.offer((frame as { event?: MailboxEvent | LiveEvent }).event);
    });
    connection.on("connected", ({ reconnect }) => {
      if (!reconnect) void this.syncNow().catch((error) => connection.emit("error", error));
    });
    connection.addReconnectHook(
      (sent) => this.syncNow(sent[0]?.reply as Promise<SyncBatch> | undefined),
      () => (this.syncing === null ? [{ type: "SYNC", ...this.syncFields() }] : []),
    );
  }

  /**
   * SYNC until `has_more` is false; concurrent calls share one run (and repeat it once).
   * `firstPage`: the reply to a SYNC from the cursor already written (a reconnect's, behind
   * AUTH); a page from behind the cursor is still right, as only what is past it goes out.
   */
  syncNow(firstPage?: Promise<SyncBatch>): Promise<void> {
    if (this.syncing !== null) {
      this.again = true;
      return this.syncing;
    }
    this.syncing = this.run(firstPage).finally(() => {
      this.syncing = null;
    });
    return this.syncing;
  }

  private async run(firstPage?: Promise<SyncBatch>): Promise<void> {
    let delivered = 0;
    let passes = 0;
    do {
      this.again = false;
      passes += 1;
      delivered += await this.syncPages(firstPage);
      firstPage = undefined;
      const held = this.held.sort((a, b) => a.mailbox_seq - b.mailbox_seq);
      this.held = [];
      for (const event of held) {
        if (event.mailbox_seq <= this.cursor) continue;
        if (event.mailbox_seq !== this.cursor + 1) {
          // Still a gap after a SYNC: once more; past that the mailbox (the truth) will
          // bring these on a later SYNC, so drop them rather than loop.
          if (passes < MAX_GAP_PASSES) this.again = true;
          break;
        }
        if (this.deliver(event)) delivered += 1;
      }
    } while (this.again);
    this.emit("synced", { cursor: this.cursor, events: delivered });
  }

  /** SYNC pages from the cursor until `has_more` is false; answers how many events went out. */
  private async syncPages(firstPage?: Promise<SyncBatch>): Promise<number> {
    let delivered = 0;
    for (;;) {
      const batch = await (firstPage ?? this.connection.request<SyncBatch>("SYNC", this.syncFields()));
      firstPage = undefined;
      if (batch.history_truncated === true) this.emit("historyTruncated", { after: this.cursor });
      for (const event of batch.events) if (this.deliver(event)) delivered += 1;
      // Entries of this device are skipped by the server but still move the cursor.
      this.advance(batch.next_mailbox_seq);
      if (!batch.has_more) return delivered;
    }
  }

  private syncFields(): { after_mailbox_seq: number; limit: number } {
    return { after_mailbox_seq: this.cursor, limit: this.pageSize };
  }

  /** An EVENT push: the next one is delivered, a duplicate dropped, a gap triggers SYNC; a live
   * one goes out as `live` whatever the cursor (it has no place in the mailbox's order). */
  offer(event: MailboxEvent | LiveEvent | undefined): void {
    if (event === undefined) return;
    if (isLive(event)) {
      this.prepare(event);
      this.emit("live", event);
      return;
    }
    if (typeof event.mailbox_seq !== "number") return;
    if (this.syncing !== null) {
      this.held.push(event);
      return;
    }
    if (event.mailbox_seq <= this.cursor) return;
    if (event.mailbox_seq === this.cursor + 1) {
      this.deliver(event);
      return;
    }
    this.held.push(event);
    void this.syncNow().catch((error) => this.connection.emit("error", error));
  }

  private deliver(event: MailboxEvent): boolean {
    if (event.mailbox_seq <= this.cursor) return false;
    this.prepare(event);
    this.emit("event", event); // handed on first, then the cursor (and its store) moves past it
    this.advance(event.mailbox_seq);
    return true;
  }

  private advance(mailboxSeq: number): void {
    if (mailboxSeq > this.cursor) {
      this.cursor = mailboxSeq;
      this.store.save(mailboxSeq);
    }
  }
}

/** A live EVENT has `live: true` and no `mailbox_seq` (§6.5). */
function isLive(event: MailboxEvent | LiveEvent): event is LiveEvent {
  return (event as LiveEvent).live === true && (event as Partial<MailboxEvent>).mailbox_seq === undefined;
}
