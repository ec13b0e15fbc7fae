"""Built-in extender policy: answers filter/prioritize/preempt itself (pure Python).

Public API (stable, used by the rest of extproxy)::

    PolicyError                      .field, .reason; str == "<field>: <reason>"
    parse_policy(name, data) -> Policy
    default_policy() -> Policy
    FilterOutcome(passed, failed, unresolvable)
    Policy.filter / prioritize / preempt / record_binding / forget_pod, .name, .binds

Modules, one job each:

* ``errors``    - PolicyError
* ``parse``     - policy mapping -> Policy, validation, ``default_policy``
* ``policy``    - Policy and FilterOutcome (running rules, combining scores)
* ``rules``     - the rule kinds
* ``selector``  - label-selector strings (with the ``>``/``<`` extension)
* ``cel``       - CEL compile/evaluate (cel-python)
* ``resources`` - quantities, pod requests, the bound-pods ledger

Rule kinds: filters ``requiredLabels``, ``avoidTaints``, ``resourceFit``,
``celFilter``; scores ``preferredLabels`` (per-label ``weight``, rule weight
``ruleWeight``), ``spread``, ``leastAllocated``, ``celScore`` (``weight``).
Score rules are averaged by weight and rounded to an int 0..10.
"""

from .errors import PolicyError
from .parse import default_policy, parse_policy
from .policy import FilterOutcome, Policy

__all__ = ["FilterOutcome", "Policy", "PolicyError", "default_policy", "parse_policy"]
