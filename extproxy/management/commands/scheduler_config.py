"""`manage.py scheduler_config`: the `extenders:` section that points kube-scheduler at this proxy.

Per-backend form (the default): one entry per configured backend, identical to the backend's own
entry except that `urlPrefix` becomes `<scheme>://HOST:PORT/extender/<backend-name>`, so the
scheduler's behaviour (weights, managedResources, nodeCacheCapable, ignorable, order) is unchanged.
The backend's own TLS settings are for the proxy's connection to the backend and never printed;
`enableHTTPS`/`tlsConfig` describe the scheduler's connection to the proxy and appear only with
`--scheme https`.

With `--combined`: one entry for `/extender/<verb>` whose fields are derived from the backends by
`semantics.combined_entry`, or a refusal with the reason when one entry cannot represent them.

Reads the configuration through `extproxy.config.load_config`; prints, writes nothing.
"""
from __future__ import annotations

import os
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from extproxy import semantics
from extproxy.config import SUPPORTED_API_VERSIONS, BackendConfig, ConfigError, ProxyConfig, load_config


class Command(BaseCommand):
    help = "Print the extenders section of a KubeSchedulerConfiguration that points kube-scheduler at this proxy."
    # Prints configuration only; it must work (and stay pipeable) whatever the rest of the project's state.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=None,
                            help="host the scheduler reaches the proxy at (default: $HOST or 127.0.0.1)")
        parser.add_argument("--port", default=None,
                            help="port the scheduler reaches the proxy at "
                                 "(default: $EXTPROXY_EXTENDER_PORT, the extender listener, else $PORT or 8000)")
        parser.add_argument("--scheme", choices=("http", "https"), default=None,
                            help="scheme of the proxy's URL; https adds enableHTTPS and tlsConfig "
                                 "(default: https when EXTPROXY_EXTENDER_TLS_CERT is set, else http)")
        parser.add_argument("--tls-ca-file", default="",
                            help="with --scheme https: CA file the scheduler verifies the proxy with")
        parser.add_argument("--tls-server-name", default="",
                            help="with --scheme https: server name (SNI) the scheduler verifies")
        parser.add_argument("--tls-cert-file", default="",
                            help="with --scheme https: the client certificate the scheduler presents "
                                 "(required when EXTPROXY_EXTENDER_TLS_CLIENT_CA is set)")
        parser.add_argument("--tls-key-file", default="", help="with --tls-cert-file: its key")
        parser.add_argument("--combined", action="store_true",
                            help="one entry for the proxy's combined endpoints instead of one per backend")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = load_config(getattr(settings, "EXTPROXY_CONFIG", ""))
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        scheme = options["scheme"] or ("https" if getattr(settings, "EXTPROXY_EXTENDER_TLS_CERT", "") else "http")
        if getattr(settings, "EXTPROXY_EXTENDER_TLS_CLIENT_CA", "") and scheme == "https" and not options["tls_cert_file"]:
            self.stderr.write("scheduler_config: the extender port requires a client certificate "
                              "(EXTPROXY_EXTENDER_TLS_CLIENT_CA): add --tls-cert-file and --tls-key-file")
        extender_port, main_port = os.environ.get("EXTPROXY_EXTENDER_PORT"), os.environ.get("PORT") or "8000"
        if extender_port and options["port"] and str(options["port"]) == main_port != extender_port:
            # With its own listener, the main port answers 404 for /extender/: every call would fail.
            self.stderr.write(f"scheduler_config: --port {main_port} is the main port, which does not serve "
                              f"/extender/ while EXTPROXY_EXTENDER_PORT is set: the scheduler's port is "
                              f"{extender_port} (leave --port out to use it)")
        base = proxy_base_url(scheme, options["host"], options["port"])
        tls = tls_entry(options) if scheme == "https" else None
        if options["combined"]:
            self.stdout.write(render_combined(config, base, tls), ending="")
            return
        self.stdout.write(render_per_backend(config, base, tls), ending="")


def proxy_base_url(scheme: str, host: str | None, port: str | int | None) -> str:
    host = host or os.environ.get("HOST") or "127.0.0.1"
    # The extender listener (listener.py) is the scheduler's port when it is configured.
    port = port or os.environ.get("EXTPROXY_EXTENDER_PORT") or os.environ.get("PORT") or "8000"
    try:
        port_number = int(port)
    except (TypeError, ValueError):
        raise CommandError(f"--port: {port!r} is not a port number") from None
    if not 0 < port_number < 65536:
        raise CommandError(f"--port: {port_number} is out of range 1-65535")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"{scheme}://{host}:{port_number}/extender"


def tls_entry(options: dict[str, Any]) -> dict[str, Any]:
    tls: dict[str, Any] = {}
    if options.get("tls_server_name"):
        tls["serverName"] = options["tls_server_name"]
    if options.get("tls_cert_file"):
        tls["certFile"] = options["tls_cert_file"]
    if options.get("tls_key_file"):
        tls["keyFile"] = options["tls_key_file"]
    if options.get("tls_ca_file"):
        tls["caFile"] = options["tls_ca_file"]
    return tls


def extender_entry(backend: BackendConfig, base: str, tls: dict[str, Any] | None) -> dict[str, Any]:
    """The backend's scheduler entry, pointed at the proxy; field order as in config/v1."""
    entry: dict[str, Any] = {"urlPrefix": f"{base}/{backend.name}"}
    for key, value in (("filterVerb", backend.filter_verb), ("preemptVerb", backend.preempt_verb),
                       ("prioritizeVerb", backend.prioritize_verb)):
        if value:
            entry[key] = value
    if backend.weight:
        entry["weight"] = backend.weight
    if backend.bind_verb:
        entry["bindVerb"] = backend.bind_verb
    if tls is not None:
        entry["enableHTTPS"] = True
        if tls:
            entry["tlsConfig"] = dict(tls)
    if backend.http_timeout_raw:
        entry["httpTimeout"] = backend.http_timeout_raw
    entry["nodeCacheCapable"] = backend.node_cache_capable
    if backend.managed_resources:
        entry["managedResources"] = [
            {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler} for r in backend.managed_resources
        ]
    entry["ignorable"] = backend.ignorable
    return entry


def render_per_backend(config: ProxyConfig, base: str, tls: dict[str, Any] | None) -> str:
    lines = [
        f"# extenders for a KubeSchedulerConfiguration (apiVersion {SUPPORTED_API_VERSIONS[0]}),",
        f"# one per backend of {config.source}, each pointed at extproxy:",
    ]
    for backend in config.backends:
        target = backend.url_prefix if backend.url_prefix else f"policy {backend.policy}"
        lines.append(f"# backend {backend.name} <- {target}")
    if tls is not None and "caFile" not in tls:
        lines.append("# enableHTTPS without a CA: kube-scheduler will not verify the proxy's certificate")
    entries = [extender_entry(b, base, tls) for b in config.backends]
    body = yaml.safe_dump({"extenders": entries}, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def render_combined(config: ProxyConfig, base: str, tls: dict[str, Any] | None) -> str:
    """One entry for /extender/<verb>, derived so the scheduler's behaviour does not change."""
    entry = semantics.combined_entry(
        config.backends, url_prefix=base, parallel_filter=config.parallel_filter
    )
    if isinstance(entry, semantics.CombinedRefusal):
        raise CommandError(f"--combined: cannot be represented by one entry: {entry.reason}")
    if tls is not None:
        entry.update(tls)
    lines = [
        f"# one combined extender entry for every backend of {config.source}:",
        *(f"# backend {b.name} <- {b.url_prefix or 'policy ' + b.policy}" for b in semantics.scheduler_order(config.backends)),
        *(f"# note: {note}" for note in semantics.combined_caveats(config.backends)),
    ]
    body = yaml.safe_dump({"extenders": [entry]}, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body
