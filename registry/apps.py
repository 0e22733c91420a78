"""The per-tenant custom message type registry (design §3). Built by the registry issue."""

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "registry"

    def ready(self) -> None:
        # The core's side (qim/content_types.py, qim/hooks.py): SEND and rendering read the
        # tenants' types through this node's cache; a new tenant gets the built-in qim.* rows.
        from qim.content_types import install_type_registry
        from qim.hooks import tenant_created
        from registry.actions import do_install_builtins
        from registry.cache import registry_cache

        install_type_registry(registry_cache)
        tenant_created.register(do_install_builtins)
