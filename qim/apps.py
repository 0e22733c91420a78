"""The core app: tenants, users, devices, tokens, the gateway, conversations and the mailbox."""

from django.apps import AppConfig


class QimConfig(AppConfig):
    name = "qim"
    verbose_name = "QIM core"

    def ready(self) -> None:
        # The core's backends (qim/infra/backends.py chooses memory or Redis for all of them).
        from qim.node.presence import register_presence_backend
        from qim.infra.ratelimit import register_rate_limit_backend

        register_presence_backend()
        register_rate_limit_backend()
        # Each app's frames module registers its handlers in the gateway's dispatch table.
        from qim.gateway.dispatch import load_frame_modules

        load_frame_modules()
        # The nodes' side of revocation: its notice handler and re-check loop register here.
        import qim.gateway.revocation  # noqa: F401
        import qim.actions.credentials  # noqa: F401  (deleted devices announce their tokens)
