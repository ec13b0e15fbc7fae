"""The extender v1 wire types (``k8s.io/kube-scheduler/extender/v1``) as Python dataclasses.

Owns the shapes only: ExtenderArgs, ExtenderFilterResult, HostPriority, ExtenderBindingArgs/Result
and ExtenderPreemptionArgs/Result (reference: extender-protocol.md sections 1, 2 and 5). Pod and
Node objects stay plain dicts exactly as received. ``Verb`` names the four calls.

May import: the standard library only.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import EnumType, StrEnum

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


class ChoicesType(EnumType):
    """``values`` and ``choices`` on the class, as Django's TextChoices has them, without Django."""

    @property
    def values(cls) -> list[str]:
        return [member.value for member in cls]  # type: ignore[var-annotated]

    @property
    def choices(cls) -> list[tuple[str, str]]:
        """(value, label) pairs for model fields; labels as TextChoices makes them ("Ok", "Filter")."""
        return [(member.value, member.name.replace("_", " ").title()) for member in cls]  # type: ignore[var-annotated]


class Choices(StrEnum, metaclass=ChoicesType):
    """A StrEnum that one model field, the API and the pure core can all use: the one list of its words."""


class Verb(Choices):
    """The four extender calls: the one list of them (stored values, API choices, config, endpoints)."""

    FILTER = "filter"
    PRIORITIZE = "prioritize"
    BIND = "bind"
    PREEMPT = "preempt"

    @property
    def answers_in_error_field(self) -> bool:
        """How a failure reaches the scheduler for this verb.

        Filter and bind replies have an ``Error`` field: a failure is a 200 whose Error says why.
        Prioritize and preempt replies have none: a failure can only be a non-200 status.
        """
        return self in (Verb.FILTER, Verb.BIND)

    @classmethod
    def of(cls, text: str) -> Verb | None:
        """The verb spelled ``text``, or None."""
        try:
            return cls(text)
        except ValueError:
            return None


@dataclass
class ExtenderArgs:
    """ExtenderArgs (filter/prioritize request).

    ``pod`` is ``{}`` when the JSON Pod is null/absent. ``nodes`` holds NodeList items, or None
    when ``Nodes`` is null/absent; ``nodes_metadata`` is the NodeList ``metadata`` (``{}`` when
    Nodes is present without it), kept so encoding round-trips.
    """

    pod: dict
    nodes: list[dict] | None
    node_names: list[str] | None
    nodes_metadata: dict | None = None
    # (namespace, name, uid) as Go reads them from the request's bytes (identity.py)
    pod_identity: tuple[str, str, str] = field(default=("", "", ""), compare=False)


@dataclass
class FilterResult:
    """ExtenderFilterResult. Null/absent failure maps decode to ``{}``."""

    nodes: list[dict] | None
    node_names: list[str] | None
    failed_nodes: dict[str, str]
    failed_and_unresolvable: dict[str, str]
    error: str
    nodes_metadata: dict | None = None
    node_items: list[bytes] | None = None  # each returned Node's bytes (decoded names_only)
    node_item_names: list[str] | None = None  # each returned Node's metadata.name (decoded names_only)


@dataclass
class HostPriority:
    host: str
    score: int


@dataclass
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclass
class BindingResult:
    error: str


@dataclass
class Victims:
    """Victims: full Pod objects (a JSON null item stays None)."""

    pods: list[dict]
    num_pdb_violations: int


@dataclass
class MetaVictims:
    """MetaVictims: the victims' UIDs (a null MetaPod decodes to ``""``, and is counted in
    ``nil_pods``: kube-scheduler cannot read a nil *MetaPod, see semantics.judge_preempt)."""

    pods: list[str]
    num_pdb_violations: int
    nil_pods: int = field(default=0, compare=False)


@dataclass
class PreemptionArgs:
    pod: dict
    node_to_victims: dict[str, Victims | None] | None
    node_to_meta_victims: dict[str, MetaVictims | None] | None


@dataclass
class PreemptionResult:
    node_to_meta_victims: dict[str, MetaVictims | None]  # None value = JSON null for that node

