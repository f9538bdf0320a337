"""The memory admin: read-only facts; deleting goes through memory_forget."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from memory_app import services
from memory_app.models import MemoryEntry, MemoryStats, MemoryTerm

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(user)
    return client


def test_list_view_and_no_add_or_change(admin_client_, project):
    entry, _ = services.memory_remember(project=project, text="Shown in the admin.")
    base = f"/{settings.ADMIN_PATH}memory_app/memoryentry/"
    listing = admin_client_.get(base)
    assert listing.status_code == 200
    assert "Shown in the admin." in listing.content.decode()
    assert admin_client_.get(f"{base}add/").status_code == 403
    before = MemoryEntry.objects.values_list("text", flat=True).get()
    response = admin_client_.post(f"{base}{entry.id}/change/", {"text": "edited"})
    assert response.status_code == 403
    assert MemoryEntry.objects.values_list("text", flat=True).get() == before


def test_delete_action_forgets_entries_and_their_counts(admin_client_, project):
    keep, _ = services.memory_remember(project=project, text="Keep me.")
    drop, _ = services.memory_remember(project=project, text="Drop me now.")
    response = admin_client_.post(
        f"/{settings.ADMIN_PATH}memory_app/memoryentry/",
        {"action": "delete_selected", "_selected_action": [str(drop.id)], "post": "yes"},
    )
    assert response.status_code == 302
    assert list(MemoryEntry.objects.values_list("id", flat=True)) == [keep.id]
    assert set(MemoryTerm.objects.values_list("entry_id", flat=True)) == {keep.id}
    assert list(MemoryStats.objects.values_list("entries", "terms")) == [(1, keep.term_count)]
