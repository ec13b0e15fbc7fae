"""The Go types of a Pod's and a Node's fields, as far as encoding/json's reading depends on them.

encoding/json binds a key to a struct field by its exact name, else by its case-folded name
(decode.go, ``object``), so ``Metadata`` and ``metadata`` are one field; a map's keys are data,
kept as spelled (``labels``' ``App`` and ``app`` are two labels). ``null`` sets a map, a pointer
or a slice to nil and leaves anything else as it was. merged.py applies these rules while it
builds a Pod or Node dict, so every reader of the dict (identity, policies, interest, labels)
reads the field the scheduler reads.

Only the structs whose fields extproxy or a policy reads are described (a struct inside one
costs each object a check), each with core/v1's
json tags for it (k8s.io/api/core/v1/types.go); a key that folds to none of them is kept as
spelled (it may be a field of a later version). What is not described (``affinity``'s inside, a
volume) is read as merged.py reads any JSON: keys as spelled, ``null`` keeping a value.

May import: ``protocol.gojson``. No Django, no I/O.
"""
from __future__ import annotations

from .gojson import _Fields


class Struct:
    """A struct: its fields' json names and, where it matters, their types (None: a scalar or a
    type not described)."""

    __slots__ = ("fields", "names", "exact", "nested")

    def __init__(self, **fields: "Shape") -> None:
        self.fields = fields
        self.names = _Fields(list(fields))
        self.exact = frozenset(fields)
        # the fields a value read without repeats can hold a misspelt key or a null map value in
        self.nested: tuple[tuple[str, Struct | Ptr | Map | Slice], ...] = tuple(
            (name, shape) for name, shape in fields.items() if shape is not None and _deep(shape))

    def field(self, key: str) -> tuple[str, "Shape"]:
        """The field ``key`` binds to (exact, else folded) and its type; an unknown key as it is."""
        name = self.names.match(key) or key
        return name, self.fields.get(name)


class Ptr:
    """A pointer (``to``: the struct it points to, or None): ``null`` sets it to nil."""

    __slots__ = ("to",)

    def __init__(self, to: Struct | None = None) -> None:
        self.to = to


class Map:
    """A map: keys as spelled; ``strings``: map[string]string, whose ``null`` value is ""."""

    __slots__ = ("strings",)

    def __init__(self, strings: bool = False) -> None:
        self.strings = strings


class Slice:
    __slots__ = ("elem",)

    def __init__(self, elem: Struct | None = None) -> None:
        self.elem = elem


Shape = Struct | Ptr | Map | Slice | None


def _deep(shape: Shape) -> bool:
    """Whether a value of this type can hold a struct (keys to fold) or a map[string]string."""
    if isinstance(shape, (Ptr, Slice)):
        return (shape.to if isinstance(shape, Ptr) else shape.elem) is not None
    return isinstance(shape, Struct) or (isinstance(shape, Map) and shape.strings)


NIL_ON_NULL = (Ptr, Map, Slice)

_: Shape = None  # a scalar (string, number, bool), or a type whose inside is not described
TIME = Ptr()  # metav1.Time: its UnmarshalJSON makes null the zero time, which is written null

_RESOURCES = Struct(limits=Map(), requests=Map(), claims=Slice())
_CONTAINER = Struct(
    name=_, image=_, command=Slice(), args=Slice(), workingDir=_, ports=Slice(), envFrom=Slice(),
    env=Slice(), resources=_RESOURCES, resizePolicy=Slice(),
    restartPolicy=Ptr(), volumeMounts=Slice(), volumeDevices=Slice(),
    livenessProbe=Ptr(), readinessProbe=Ptr(), startupProbe=Ptr(),
    lifecycle=Ptr(),
    terminationMessagePath=_, terminationMessagePolicy=_, imagePullPolicy=_, securityContext=Ptr(),
    stdin=_, stdinOnce=_, tty=_)

META = Struct(
    name=_, generateName=_, namespace=_, selfLink=_, uid=_, resourceVersion=_, generation=_,
    creationTimestamp=TIME, deletionTimestamp=TIME, deletionGracePeriodSeconds=Ptr(),
    labels=Map(strings=True), annotations=Map(strings=True),
    ownerReferences=Slice(),
    finalizers=Slice(), clusterName=_, managedFields=Slice())

POD = Struct(
    apiVersion=_, kind=_, metadata=META,
    spec=Struct(
        volumes=Slice(), initContainers=Slice(_CONTAINER), containers=Slice(_CONTAINER),
        ephemeralContainers=Slice(), restartPolicy=_, terminationGracePeriodSeconds=Ptr(),
        activeDeadlineSeconds=Ptr(), dnsPolicy=_, nodeSelector=Map(strings=True),
        serviceAccountName=_, serviceAccount=_, automountServiceAccountToken=Ptr(), nodeName=_,
        hostNetwork=_, hostPID=_, hostIPC=_, shareProcessNamespace=Ptr(), securityContext=Ptr(),
        imagePullSecrets=Slice(), hostname=_, subdomain=_, affinity=Ptr(), schedulerName=_,
        tolerations=Slice(Struct(key=_, operator=_, value=_, effect=_, tolerationSeconds=Ptr())),
        hostAliases=Slice(), priorityClassName=_, priority=Ptr(), dnsConfig=Ptr(), readinessGates=Slice(),
        runtimeClassName=Ptr(), enableServiceLinks=Ptr(), preemptionPolicy=Ptr(), overhead=Map(),
        topologySpreadConstraints=Slice(), setHostnameAsFQDN=Ptr(), os=Ptr(), hostUsers=Ptr(),
        schedulingGates=Slice(), resourceClaims=Slice(), resources=Ptr(_RESOURCES)),
    status=Struct(
        phase=_, conditions=Slice(), message=_, reason=_, nominatedNodeName=_,
        hostIP=_, hostIPs=Slice(), podIP=_, podIPs=Slice(), startTime=TIME, initContainerStatuses=Slice(),
        containerStatuses=Slice(), qosClass=_, ephemeralContainerStatuses=Slice(), resize=_,
        resourceClaimStatuses=Slice()))

NODE = Struct(
    apiVersion=_, kind=_, metadata=META,
    spec=Struct(
        podCIDR=_, podCIDRs=Slice(), providerID=_, unschedulable=_,
        taints=Slice(Struct(key=_, value=_, effect=_, timeAdded=TIME)), configSource=Ptr(), externalID=_),
    status=Struct(
        capacity=Map(), allocatable=Map(), phase=_, conditions=Slice(), addresses=Slice(),
        daemonEndpoints=_, nodeInfo=_, images=Slice(),
        volumesInUse=Slice(), volumesAttached=Slice(), config=Ptr(), runtimeHandlers=Slice(),
        features=Ptr()))
