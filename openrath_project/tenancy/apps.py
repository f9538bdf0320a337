from django.apps import AppConfig
from django.db.models.signals import post_migrate, pre_save


class TenancyConfig(AppConfig):
    name = "openrath_project.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from openrath_project.tenancy import fixed_columns, login_guard

        # Invariant guards, not domain flow: a row's tenant and project are fixed at creation
        # (checked for every app's models here, in the database by triggers installed after
        # each migrate). See fixed_columns.
        for model in fixed_columns.owned_models():
            pre_save.connect(
                fixed_columns.check_owner_unchanged,
                sender=model,
                dispatch_uid=f"openrath-fixed-owner-{model._meta.label}",
            )
        post_migrate.connect(
            fixed_columns.install_guards_after_migrate,
            sender=self,
            dispatch_uid="openrath-install-guards",
        )
        login_guard.connect()
