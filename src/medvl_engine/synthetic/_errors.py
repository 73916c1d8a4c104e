"""The error raised for requests the synthetic generators cannot honour."""

from __future__ import annotations

from medvl_engine.errors import ConfigError

__all__ = ["SyntheticDataError"]


class SyntheticDataError(ConfigError, ValueError):
    """An argument of a synthetic-data generator is out of range or contradicts another one."""
