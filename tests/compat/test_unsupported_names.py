"""Item 10: an OpenRath name left out on purpose fails with one clear error naming the
alternative; a name OpenRath never had is the usual AttributeError / ImportError."""

from __future__ import annotations

import importlib

import pytest

from openrath_project.compat import UNSUPPORTED, OpenRathNameUnsupported


def test_importing_an_unsupported_name_names_the_alternative():
    with pytest.raises(OpenRathNameUnsupported) as caught:
        from openrath_project.session import run_session_loop  # noqa: F401
    message = str(caught.value)
    assert message.startswith(
        "openrath_project.session.run_session_loop (OpenRath's rath.session.run_session_loop) "
        "is not supported: the tool loop is flow.Agent's"
    )
    assert "Use instead: out = flow.Agent(prompt, provider, tools=...)(session)" in message
    assert message.endswith("See docs/migrating-from-openrath.md.")
    assert isinstance(caught.value, ImportError)


@pytest.mark.parametrize(
    ("module", "name"),
    [(module, name) for module, names in UNSUPPORTED.items() for name in names],
)
def test_every_listed_name_raises_it(module, name):
    mod = importlib.import_module(module)
    with pytest.raises(OpenRathNameUnsupported) as caught:
        getattr(mod, name)
    assert caught.value.openrath_name == name
    assert caught.value.alternative in str(caught.value)


def test_names_openrath_never_had_are_ordinary_errors():
    import openrath_project.backend as backend
    import openrath_project.session as session
    from openrath_project import flow

    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        session.nonsense  # noqa: B018
    with pytest.raises(AttributeError):
        flow.nonsense  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'nonsense'"):
        from openrath_project.backend import nonsense  # noqa: F401
    assert not hasattr(backend, "nonsense")


def test_the_config_store_is_read_only(tmp_path, monkeypatch):
    from openrath_project.config.store import ConfigStore

    monkeypatch.setenv("OPENRATH_HOME", str(tmp_path))
    store = ConfigStore.load()
    with pytest.raises(OpenRathNameUnsupported, match="never written to disk"):
        store.save()
    assert list(tmp_path.iterdir()) == []
