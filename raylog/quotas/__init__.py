"""Client quotas as Kafka's: produce and fetch byte rates and request-time shares per user
and client id, measured with a windowed rate and enforced by delaying answers
(docs/quotas.md). Plain Python: the controller stores the quotas, brokers and Kafka
listeners follow them and enforce them locally.
"""

from raylog.quotas.enforcer import ClientQuotas, QuotaSettings
from raylog.quotas.entity import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    check_quotas,
)
from raylog.quotas.rate import WindowedRate

__all__ = ["CONSUMER_BYTE_RATE", "DEFAULT", "PRODUCER_BYTE_RATE", "QUOTA_KEYS",
           "REQUEST_PERCENTAGE", "ClientQuotas", "QuotaEntity", "QuotaSettings",
           "WindowedRate", "check_quotas"]
