"""The Kubernetes API, through the official client: binding pods, and the Nodes the node cache lists.

Configuration: in-cluster service account when running in a pod, else the kubeconfig named
by KUBECONFIG (or ~/.kube/config). The client is synchronous; callers run it in a thread,
never on the event loop.
"""
from __future__ import annotations

import os
import threading

from kubernetes import client, config

_lock = threading.Lock()
_api: client.CoreV1Api | None = None


class KubeError(Exception):
    pass


def core_api() -> client.CoreV1Api:
    global _api
    with _lock:
        if _api is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                try:
                    # Read KUBECONFIG now: the client reads it once, when it is imported.
                    config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
                except Exception as exc:  # no cluster configured: say so where it matters
                    raise KubeError(f"no Kubernetes API configured (in-cluster or KUBECONFIG): {exc}") from exc
            _api = client.CoreV1Api()
        return _api


def reset() -> None:
    """Forget the client (tests point KUBECONFIG elsewhere)."""
    global _api
    with _lock:
        _api = None


def bind_pod(namespace: str, name: str, uid: str, node: str) -> None:
    """POST pods/<name>/binding, as the scheduler's DefaultBinder does. Raises KubeError."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    try:
        # _preload_content=False: the API answers a Status, which the generated model misreads.
        core_api().create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
    except client.ApiException as exc:
        raise KubeError(f"binding {namespace}/{name} to {node} failed: {exc.status} {exc.reason}") from exc
    except KubeError:
        raise
    except Exception as exc:
        raise KubeError(f"binding {namespace}/{name} to {node} failed: {exc}") from exc
