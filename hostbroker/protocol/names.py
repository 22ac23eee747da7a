"""The name each API goes by in stats, metrics and ``hostbroker top``: its
key's name, lower-case. Pure: a table of the protocol's keys, below the
workers that count requests and the readers that show them."""

from __future__ import annotations

from hostbroker.protocol.api import ApiKey
from hostbroker.protocol.groups import GroupApiKey

_API_NAMES = {int(k): k.name.lower() for enum in (ApiKey, GroupApiKey) for k in enum}


def api_name(api_key: int) -> str:
    """The name an API's stats go by: its key's name, lower-case (``produce``,
    ``join_group``), or ``api_<key>`` for a key without one."""
    return _API_NAMES.get(api_key) or f"api_{api_key}"
