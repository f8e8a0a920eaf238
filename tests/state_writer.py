"""A Python process saving documents to one chain's state file, driven by
tests/test_state_file_shared_lock.py next to TypeScript processes (tests/ts_client/state_writer.mjs)
doing the same in the same directory.

Each stdin line is a JSON list of chain documents, all saved at once, from a thread each (as
several ChainClients of one service, sharing its state directory, would); the answer is one
JSON line, a result per document: "wrote", "held" (the file already held it or a newer
one) or "failed: <why>" (the save raised).

    python tests/state_writer.py STATE_DIR CHAIN REGISTRY_JSON
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# This checkout's SDK, whichever one the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))

from chainclient import ChainDocument, Provider, Registry  # noqa: E402
from chainclient.state_file import StateFile  # noqa: E402
from chainclient.transport import describe  # noqa: E402


def main(state_dir: str, chain: str, registry_json: str) -> None:
    registry = Registry(
        {
            name: Provider(spec["destination"], {model: set(caps) for model, caps in spec["models"].items()})
            for name, spec in json.loads(registry_json).items()
        }
    )
    state_file = StateFile(state_dir, chain=chain, registry=registry)

    def save(data: object) -> str:
        document = ChainDocument.from_json(data, registry=registry, source="live")
        try:
            return "wrote" if state_file.save(document) is None else "held"
        except (OSError, TypeError, ValueError) as exc:
            return f"failed: {describe(exc)}"

    print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
    with ThreadPoolExecutor(max_workers=16) as threads:
        for line in sys.stdin:
            print(json.dumps(list(threads.map(save, json.loads(line)))), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
