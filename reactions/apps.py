"""Reactions: the idempotent aggregate executor (design §4). Built by the reactions issue."""

from django.apps import AppConfig


class ReactionsConfig(AppConfig):
    name = "reactions"
