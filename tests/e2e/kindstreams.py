"""A long streamed chat completion sent from a pod of a kind cluster, through the router's
Service as a client's: started, known to be generating (its first token logged), and read to its
end. The day-2 kind tests (a node drain, an operator upgrade) run one across the operation and
ask whether it ended whole: every token asked for, ``finish_reason: length``, ``[DONE]``, and no
error event (a cut stream ends without ``[DONE]``, or, through a proxy, with an
``upstream_disconnected`` error event).
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl
from tests.e2e.waiting import eventually

#: The client: prints ``first token`` once one arrived, then one JSON line of how it ended.
STREAM_CLIENT = """
import json, sys, httpx
body = {"model": sys.argv[2], "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": int(sys.argv[3]), "stream": True, "ignore_eos": True}
end = {"status": None, "tokens": 0, "done": False, "finish": None, "errors": []}
try:
    with httpx.stream("POST", sys.argv[1], json=body, timeout=600) as answer:
        end["status"] = answer.status_code
        for line in answer.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                end["done"] = True
                continue
            event = json.loads(data)
            if "error" in event:
                end["errors"].append(event["error"])
            for choice in event.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    end["tokens"] += 1
                    if end["tokens"] == 1:
                        print("first token", flush=True)
                if choice.get("finish_reason"):
                    end["finish"] = choice["finish_reason"]
except httpx.HTTPError as err:
    end["errors"].append(f"{type(err).__name__}: {err}")
print(json.dumps(end), flush=True)
"""


async def start_stream(
    cluster: TestCluster, namespace: str, name: str, url: str, model: str, tokens: int
) -> None:
    """Start the client pod ``name`` and return once its first token arrived."""
    assert cluster.image is not None
    await kubectl(
        cluster, "-n", namespace, "run", name, f"--image={cluster.image}",
        "--restart=Never", "--image-pull-policy=Never", "--command", "--",
        "python", "-c", STREAM_CLIENT, url, model, str(tokens),
    )  # fmt: skip

    async def generating() -> bool:
        _, out, _ = await kubectl(cluster, "-n", namespace, "logs", f"pod/{name}", check=False)
        if out.strip().startswith("{"):
            raise AssertionError(f"the stream ended before its first token: {out}")
        return "first token" in out

    await eventually(generating, timeout=300, interval=0.5, what=f"{name}'s first token")


async def stream_end(cluster: TestCluster, namespace: str, name: str) -> dict[str, Any]:
    """How the stream of client pod ``name`` ended, once it has."""
    await kubectl(
        cluster, "-n", namespace, "wait", f"pod/{name}", "--timeout=600s",
        "--for=jsonpath={.status.phase}=Succeeded",
    )  # fmt: skip
    _, out, _ = await kubectl(cluster, "-n", namespace, "logs", f"pod/{name}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def whole(end: dict[str, Any], tokens: int) -> bool:
    return bool(
        end["status"] == 200
        and end["done"]
        and end["finish"] == "length"
        and end["tokens"] == tokens
        and not end["errors"]
    )
