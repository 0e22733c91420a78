from django.apps import AppConfig


class PushProvidersConfig(AppConfig):
    name = "push_providers"
    verbose_name = "Push providers"
