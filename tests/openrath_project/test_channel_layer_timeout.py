"""The Redis channel layer's settings keep an idle stream open: redis-py 8 reads with a 5 s
socket timeout by default, as long as channels_redis's blocking pop, so an idle ``receive``
raised ``TimeoutError`` after 5 s and the WebSocket closed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tests.support import REPO, require_redis

pytestmark = pytest.mark.slow


def _production_layer_config(redis_url: str) -> dict[str, object]:
    """CHANNEL_LAYERS as the settings build it with ``REDIS_URL`` set (a fresh interpreter)."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "openrath_project.settings",
    }
    env.pop("OPENRATH_PROFILE", None)
    script = (
        "import json, django; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.CHANNEL_LAYERS['default']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_idle_receive_outlives_the_blocking_pop() -> None:
    redis_url = require_redis()
    layer_config = _production_layer_config(redis_url)
    assert layer_config["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    from channels_redis.core import RedisChannelLayer

    layer = RedisChannelLayer(**layer_config["CONFIG"])  # type: ignore[arg-type]
    host = layer_config["CONFIG"]["hosts"][0]  # type: ignore[index]
    assert host["socket_timeout"] > layer.brpop_timeout

    async def idle() -> None:
        channel = await layer.new_channel()
        # Past one blocking pop (5 s) and its socket timeout: only wait_for may end it.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(layer.receive(channel), layer.brpop_timeout + 1.5)
        await layer.send(channel, {"type": "hint"})
        assert (await asyncio.wait_for(layer.receive(channel), 10))["type"] == "hint"
        await layer.flush()

    asyncio.run(idle())
