"""The offline push worker: drains the PushTask outbox through a pluggable PushSender."""
