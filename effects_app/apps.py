from django.apps import AppConfig


class EffectsAppConfig(AppConfig):
    name = "effects_app"
    verbose_name = "Effects"
