/** Client-chosen ids: `client_msg_id` must be unique per user across conversations (§6.1). */

export function newClientMsgId(): string {
  const cryptoApi = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (cryptoApi?.randomUUID) return cryptoApi.randomUUID();
  // Insecure browser contexts lack randomUUID; time + randomness is unique enough per user.
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}`;
}
