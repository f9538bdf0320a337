from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "openrath_project.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"
