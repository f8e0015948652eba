"""A serving process's quotas: charged only to requests that name a client id, held back
by the throttle time, counted."""

import asyncio

from actors.host_quotas import HostQuotas
from raylog.quotas import QuotaEntity, QuotaSettings
from raylog.quotas.enforcer import Throttled, unwrap


def test_an_answer_over_the_quota_is_held_back_and_says_so():
    async def run():
        host = HostQuotas(QuotaSettings(window_num=2, window_size_s=0.05))
        assert await host.hold("producer_byte_rate", "c", 10**6, 0.0) == 0  # no quota yet
        host.quotas.replace({QuotaEntity(client_id="c"): {"producer_byte_rate": 1000}}, 1)
        assert await host.hold("producer_byte_rate", None, 10**6, 0.0) == 0  # nobody's
        assert await host.hold("producer_byte_rate", "other", 10**6, 0.0) == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        held = await host.hold("producer_byte_rate", "c", 200, 0.0)  # 200 B over 0.05 s
        assert held == 150  # (4000 - 1000) / 1000 * 0.05 s
        assert loop.time() - started >= 0.14

    asyncio.run(run())


def test_a_throttled_answer_unwraps():
    assert unwrap(Throttled("info", 7)) == ("info", 7)
    assert unwrap("info") == ("info", 0)
