from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "openrath_project.console"
    label = "console"
    verbose_name = "Operator console"
