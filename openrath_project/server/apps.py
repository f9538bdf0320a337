from django.apps import AppConfig


class ServerConfig(AppConfig):
    name = "openrath_project.server"
    label = "openrath_server"
    verbose_name = "Server: commands and wiring"

    def ready(self) -> None:
        from openrath_project.server.ports import install_ports

        install_ports()
