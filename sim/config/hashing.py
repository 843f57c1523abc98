"""The cache key of a configuration: a hash of its JSON text."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def config_hash(obj: Any) -> str:
    """SHA-256 of a JSON-serialisable object with sorted keys (cache key)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
