"""Who may call the extender endpoints: a source allowlist, and TLS with client certificates.

The extender endpoints move pods (bind) and write records, and the scheduler sends no
credentials of its own; so they are protected at the connection:
- a source allowlist (EXTPROXY_EXTENDER_ALLOW: CIDRs, comma-separated; default loopback only,
  `*` for any source): a peer outside it is refused, on the separate extender port before
  anything is read, on the main port with 403;
- TLS (EXTPROXY_EXTENDER_TLS_CERT and _KEY) on the separate extender port, with the client's
  certificate required and verified against EXTPROXY_EXTENDER_TLS_CLIENT_CA when that is set:
  kube-scheduler presents one from its extender `tlsConfig` (certFile/keyFile, caFile for ours).
This module builds the checks and the TLS context; the listeners apply them. No I/O but
reading the certificate files once.
"""
from __future__ import annotations

import ipaddress
import ssl
from functools import lru_cache
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AccessConfigError(ValueError):
    pass


def parse_networks(text: str, setting: str = "EXTPROXY_EXTENDER_ALLOW") -> tuple[Network, ...] | None:
    """The allowed networks, or None for any source (`*`)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"]:
        return None
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise AccessConfigError(f"{setting}: {item!r} is not a CIDR or address ({exc})") from None
    return tuple(networks)


class Allowlist:
    def __init__(self, networks: tuple[Network, ...] | None) -> None:
        self.networks = networks
        self._seen: dict[str, bool] = {}  # per address: the check is on the hot path

    def allows_host(self, host: str | None) -> bool:
        if self.networks is None:
            return True
        if host is None:  # a Unix socket: whoever can open it is local
            return True
        known = self._seen.get(host)
        if known is not None:
            return known
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        allowed = any(address in network for network in self.networks)
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[host] = allowed
        return allowed

    def allows_peer(self, peer: Any) -> bool:
        """For a socket's peername: (host, port[, ...]) for IP, a path or None for Unix sockets."""
        if isinstance(peer, tuple) and peer:
            return self.allows_host(str(peer[0]))
        return self.allows_host(None)

    def describe(self) -> str:
        return "any source" if self.networks is None else ", ".join(map(str, self.networks))


@lru_cache(maxsize=1)
def allowlist() -> Allowlist:
    from django.conf import settings

    return Allowlist(parse_networks(settings.EXTPROXY_EXTENDER_ALLOW))


def server_ssl_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext | None:
    """The extender port's TLS context: None without a certificate; client certificates
    required (and verified against `client_ca_file`) when that is given."""
    if not cert_file and not key_file:
        if client_ca_file:
            raise AccessConfigError("EXTPROXY_EXTENDER_TLS_CLIENT_CA needs EXTPROXY_EXTENDER_TLS_CERT and _KEY")
        return None
    if not (cert_file and key_file):
        raise AccessConfigError("EXTPROXY_EXTENDER_TLS_CERT and EXTPROXY_EXTENDER_TLS_KEY go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
        if client_ca_file:
            context.load_verify_locations(cafile=client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise AccessConfigError(f"extender TLS: {exc}") from None
    return context


def extender_ssl_context() -> ssl.SSLContext | None:
    from django.conf import settings

    return server_ssl_context(settings.EXTPROXY_EXTENDER_TLS_CERT, settings.EXTPROXY_EXTENDER_TLS_KEY,
                              settings.EXTPROXY_EXTENDER_TLS_CLIENT_CA)
