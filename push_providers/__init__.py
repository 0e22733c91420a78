"""Push providers: APNs, FCM HTTP v1 and Web Push senders behind qim.push's PushSender
contract, chosen per device platform, with global and per-tenant credentials."""
