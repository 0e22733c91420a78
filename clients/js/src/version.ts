/** Sent as AUTH's `client_version` unless the app names its own. */
export const VERSION = "0.1.0";
