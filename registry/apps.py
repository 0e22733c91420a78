"""The per-tenant custom message type registry (design §3). Built by the registry issue."""

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "registry"
