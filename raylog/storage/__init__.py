"""Storage: partition logs of segments on local disk, with recovery, retention, compaction."""

from raylog.storage.cleaner import CleanerStats
from raylog.storage.config import LogConfig
from raylog.storage.log import AppendInfo, PartitionLog, RecoveryInfo

__all__ = ["AppendInfo", "CleanerStats", "LogConfig", "PartitionLog", "RecoveryInfo"]
