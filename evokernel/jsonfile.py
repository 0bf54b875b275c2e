"""Writing a JSON file so that a concurrent reader never sees half of it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, obj: Any, *, indent: int = 2, sort_keys: bool = False) -> None:
    """Write ``obj`` as JSON (``default=str`` for what JSON lacks) to ``path`` through a temp file
    in the same folder and a rename, so a reader sees the old file or the new one, never half of
    one. Creates the folder. Raises OSError if it is unwritable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=indent, sort_keys=sort_keys, default=str))
    os.replace(tmp, path)
