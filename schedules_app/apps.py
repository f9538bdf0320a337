from django.apps import AppConfig


class SchedulesAppConfig(AppConfig):
    name = "schedules_app"
    verbose_name = "Schedules"
