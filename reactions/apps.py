"""Reactions: the idempotent aggregate executor (design §4). Built by the reactions issue."""

from django.apps import AppConfig


class ReactionsConfig(AppConfig):
    name = "reactions"

    def ready(self) -> None:
        # The core's hooks (qim/hooks.py): a recall drops the message's reactions, a history
        # page carries their summaries.
        from qim.hooks import history_rendered, message_recalled
        from reactions.actions import do_delete_reactions
        from reactions.pusher import register_window_backend
        from reactions.queries import attach_summaries

        message_recalled.register(do_delete_reactions)
        history_rendered.register(attach_summaries)
        register_window_backend()

        from qim.hooks import conversation_purged
        from reactions.retention import purge_reactions

        # Retention (qim/ops/retention.py) takes the reactions of the messages it deletes.
        conversation_purged.register(purge_reactions)

        from django.db.models.signals import post_save

        from qim.models import MembershipInterval
        from reactions.member_cache import membership_saved

        # A leave or removal on this node ends the member's REACTION_UPDATEs at once.
        post_save.connect(membership_saved, sender=MembershipInterval, dispatch_uid="reactions-member-cache")

        # REACT batches and REACTION_UPDATE frames on /metrics (qim/ops/metrics/sources.py).
        from qim.ops.metrics.sources import metrics_scraped
        from reactions.metrics import reaction_metrics

        metrics_scraped.register(reaction_metrics)
