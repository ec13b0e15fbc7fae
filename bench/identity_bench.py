"""What reading an object's identity costs: one Node, and filter replies of 100 and 1000 Nodes.

A report, not a test. Realistic Nodes (the fixtures' nodes, with an image list like a busy
node's, about 8 KB each) are read as the protocol reads a backend's filter reply; nothing is
matched by bytes (no ``known``), so every item goes through the identity reader.

    nice -n 10 .venv/bin/python bench/identity_bench.py   # a 1000-Node reply also with spaces, as json.dumps writes it
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from extproxy import protocol  # noqa: E402


def nodes(count: int, separators: tuple[str, str] = (",", ":")) -> list[bytes]:
    template = json.loads((ROOT / "tests" / "fixtures" / "filter-request.nodecache-false.json").read_text())
    base = template["Nodes"]["items"]
    out = []
    for i in range(count):
        node = json.loads(json.dumps(base[i % len(base)]))
        node["metadata"]["name"] = f"node-{i:05d}"
        node.setdefault("status", {})["images"] = [
            {"names": [f"registry.example/team-{j}/service-{j}@sha256:{j:064x}", f"registry.example/team-{j}/service-{j}:v1.{j}"],
             "sizeBytes": 100_000_000 + j} for j in range(24)]
        out.append(json.dumps(node, separators=separators).encode())
    return out


def reply(items: list[bytes], spaced: bool = False) -> bytes:
    if spaced:  # as Python's json.dumps writes a whole reply by default
        return b'{"Nodes": {"metadata": {}, "items": [' + b", ".join(items) + b']}, "NodeNames": null}'
    return b'{"Nodes":{"metadata":{},"items":[' + b",".join(items) + b']},"NodeNames":null}'


def best(stmt, number: int) -> float:
    """Microseconds per call, the best of 5 runs."""
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6


def pod_cost() -> None:
    """A request's Pod (the fixture's, compact as the scheduler writes it) built as a dict: json's
    last-wins reading, and protocol.merged's (the same decode, one encode to prove no key came
    twice, and its described structs' keys checked to be their fields' names)."""
    from extproxy.protocol.gojson import _any_decoder
    from extproxy.protocol.kubefields import POD
    from extproxy.protocol.merged import go_object

    request = json.loads((ROOT / "tests" / "fixtures" / "filter-request.nodecache-true.json").read_text())
    pod = json.dumps(request["Pod"], separators=(",", ":")).encode()
    last_wins = best(lambda: _any_decoder.decode(pod), 20000)
    merged = best(lambda: go_object(pod, POD), 20000)
    print(f"a request's Pod, {len(pod)} bytes: last key wins {last_wins:.2f} us, repeated keys merged {merged:.2f} us")


def main() -> None:
    pod_cost()
    one = nodes(1)[0]
    print(f"one Node, {len(one)} bytes: identity_of {best(lambda: protocol.identity_of(one, 'Nodes.items'), 20000):.2f} us")
    # Go backends write compact JSON; a Python backend's json.dumps puts a space after each , and :
    # (a list that cannot be cleared by its length: see protocol/identity.py).
    for count, spaced in ((100, False), (1000, False), (1000, True)):
        body = reply(nodes(count, (", ", ": ") if spaced else (",", ":")), spaced)
        items = best(lambda: protocol.decode_filter_result(body, names_only=True, keep_items=True), 20 if count == 1000 else 200)
        names = best(lambda: protocol.decode_filter_result(body, names_only=True), 20 if count == 1000 else 200)
        print(f"filter reply, {count} Nodes{' with spaces' if spaced else ''}, {len(body) >> 10} KB: "
              f"names and items {items / 1000:.2f} ms, "
              f"names only {names / 1000:.2f} ms")


if __name__ == "__main__":
    main()
