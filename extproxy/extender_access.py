"""Who may call the extender endpoints: a source allowlist, and TLS with client certificates.

The extender endpoints move pods (bind) and write records, and the scheduler sends no
credentials of its own; so they are protected at the connection:
- a source allowlist (EXTPROXY_EXTENDER_ALLOW: CIDRs, comma-separated; default loopback only,
  `*` for any source): a peer outside it is refused, on the separate extender port before
  anything is read, on the main port with 403;
- TLS (EXTPROXY_EXTENDER_TLS_CERT and _KEY) on the separate extender port, with the client's
  certificate required and verified against EXTPROXY_EXTENDER_TLS_CLIENT_CA when that is set:
  kube-scheduler presents one from its extender `tlsConfig` (certFile/keyFile, caFile for ours);
- the names that certificate must carry (EXTPROXY_EXTENDER_TLS_CLIENT_NAMES, one of them as its
  subject CN or a subjectAltName): a CA usually signs more clients than the scheduler (a
  cluster's CA signs every kubelet's and component's certificate), and any of them could bind pods.
This module builds the checks and the TLS context; the listeners apply them. No I/O but
reading the certificate files once.
"""
from __future__ import annotations

import ipaddress
import logging
import ssl
from functools import lru_cache
from typing import Any

from .ratelog import RateLimitedLog

log = RateLimitedLog(logging.getLogger(__name__), interval=60.0)

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


def parse_client_names(text: str, client_ca_file: str) -> frozenset[str] | None:
    """The names a client certificate must carry one of, or None for any the CA signed."""
    names = frozenset(item.strip() for item in text.split(",") if item.strip())
    if not names:
        return None
    if not client_ca_file:
        raise AccessConfigError("EXTPROXY_EXTENDER_TLS_CLIENT_NAMES needs EXTPROXY_EXTENDER_TLS_CLIENT_CA: "
                                "without client certificates there are no names to check")
    return names


@lru_cache(maxsize=1)
def client_names() -> frozenset[str] | None:
    from django.conf import settings

    return parse_client_names(settings.EXTPROXY_EXTENDER_TLS_CLIENT_NAMES, settings.EXTPROXY_EXTENDER_TLS_CLIENT_CA)


def certificate_names(peercert: Any) -> set[str]:
    """The names a verified certificate (ssl's decoded form) carries: subject CNs and
    subjectAltName entries of kind DNS, URI or IP address."""
    if not isinstance(peercert, dict):
        return set()
    names = {value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"}
    names.update(value for kind, value in peercert.get("subjectAltName", ()) if kind in ("DNS", "URI", "IP Address"))
    return names


class ConnectionCheck:
    """The listener's check of a new connection (after the TLS handshake): None admits it,
    else the reason it is closed unread, which labels extproxy_rejected_requests_total."""

    def __init__(self, sources: Allowlist, names: frozenset[str] | None) -> None:
        self.sources = sources
        self.names = names

    def __call__(self, transport: Any) -> str | None:
        if not self.sources.allows_peer(transport.get_extra_info("peername")):
            return "not-allowed"
        if self.names is not None:
            presented = certificate_names(transport.get_extra_info("peercert"))
            if not presented & self.names:
                # The operator must learn what was presented: the client sees only a closed connection.
                log.emit(logging.WARNING, "client-name", "extender port: refused a client certificate naming %s; "
                         "EXTPROXY_EXTENDER_TLS_CLIENT_NAMES admits %s", sorted(presented)[:8] or "nothing",
                         sorted(self.names))
                return "client-name"
        return None


def connection_check() -> ConnectionCheck:
    return ConnectionCheck(allowlist(), client_names())
