"""What kube-scheduler makes of extender replies: one reply, and several backends combined.

A pure package: no Django, no I/O (tests/semantics/test_purity.py proves it). A change to a
scheduler rule goes here; how bytes become messages is ``extproxy.protocol``; calling backends is
``extproxy.combined`` (the I/O around these rules).

* ``decision``: Outcome, Result and Decision, the words of a verdict;
* ``judge``: how the scheduler reads ONE backend's reply to one verb;
* ``nil_victims``: a preempt reply's null victims, which panic the scheduler, and a request's;
* ``errors``: the error texts the proxy answers so the scheduler ends with the same error;
* ``urls``: a URL with its password replaced, as errors and records show one;
* ``interest``: which backends the scheduler calls, in which order;
* ``chain``, ``filter``, ``prioritize``, ``preempt``, ``bind``: the chains, as the scheduler runs them;
* ``entry``: the combined form's single extender entry (``scheduler_config --combined``).

May import: the standard library, msgspec and ``extproxy.protocol`` (``extproxy.config`` for
annotations only). The public names are exported here.

The combination
---------------

Pure decisions for the combined endpoints (/extender/filter, /prioritize, /preempt, /bind) and
for `scheduler_config --combined`. The engine does the I/O; these functions and step machines
decide what the scheduler would have done calling each backend itself (reference §3.3, §4, §5;
upstream schedule_one.go findNodesThatPassExtenders / prioritizeNodes / extendersBinding and
preemption.go callExtenders, current releases).

Choices where the scheduler's behaviour needed interpretation
-------------------------------------------------------------
* Failure statuses across backends: current releases write each backend's maps with
  `statuses.Set` (unresolvable entries first, then failed entries not in the SAME backend's
  unresolvable map), so across backends the LAST backend to name a node wins, code and
  message: a node marked unresolvable by backend 1 and failed by backend 3 ends Unschedulable
  with backend 3's message. (Releases before the NodeToStatus rewrite aggregated reasons and
  kept UnschedulableAndUnresolvable once set; current wins, and one reply cannot carry several
  messages per node anyway.) A node in the passed list keeps any status it was given; the
  combined reply carries it too, so the scheduler sets the same status.
* A backend's failure maps may name nodes it was not sent (the scheduler does not check);
  they are applied like any other entry.
* Mode false (nodeCacheCapable: false): the scheduler takes the returned Node objects (§4.3,
  §5 item 5): names a backend returns that were not in its input are kept, and the returned
  objects, changed or not, are what the next backend is sent and what the scheduler scores
  and binds on. The filter chain carries them (``FilterChain.remaining_items``,
  ``CombinedFilter.items``) so the combined form forwards and answers them.
* Error texts: `error` is the backend's text as judged. What the proxy must put in its own
  Error field for the scheduler to end with the same text is `reply_error`: an Error field
  from a backend is passed verbatim (the scheduler uses it as a format string either way),
  any other text (HTTP status, decode error, transport error) has `%` doubled, so that the
  scheduler's fmt.Errorf prints it unchanged. A failed exchange is named by the backend's URL
  as Go's client names it (`Post "<url>": ...`); a backend the proxy did not call at all (its
  request could not be built) is named by its name in the proxy's own words instead, so the
  FailedScheduling event does not blame a backend that never saw the call.
* Preempt: ignorable backends get their empty-victim nodes dropped instead of failing
  (callExtenders; judge_preempt reads the flag). UIDs are checked against the map the proxy
  was given by the scheduler (not the shrinking map of the chain), which is the nearest the
  proxy gets to the scheduler's own check against the pods on the node.
* Bind: a default-binder outcome means the scheduler runs its Bind plugins. For a combined
  entry that is ignorable the engine gets exactly that by answering the error; otherwise it
  has to bind through the API itself (the DefaultBinder's action), see combined_caveats.
"""

from __future__ import annotations

from .bind import bind_fallthrough, choose_binder
from .decision import Decision, Outcome, Result
from .entry import COMBINED_TIMEOUT_MARGIN, CombinedRefusal, combined_caveats, combined_entry, combined_timeout
from .errors import go_format_safe, not_called_error_text, reply_error_text
from .filter import CombinedFilter, FilterChain, parallel_filter
from .interest import interested, scheduler_order
from .judge import SCORE_FACTOR, Verdict, judge_bind, judge_filter, judge_preempt, judge_prioritize
from .nil_victims import nil_victims_in_request
from .preempt import CombinedPreempt, PreemptChain
from .prioritize import combine_prioritize, listed_hosts, prioritize_answer

__all__ = [
    "Decision",
    "Outcome",
    "Result",
    "SCORE_FACTOR",
    "Verdict",
    "judge_filter",
    "judge_prioritize",
    "judge_bind",
    "judge_preempt",
    "go_format_safe",
    "nil_victims_in_request",
    "reply_error_text",
    "not_called_error_text",
    "scheduler_order",
    "interested",
    "CombinedFilter",
    "FilterChain",
    "parallel_filter",
    "combine_prioritize",
    "listed_hosts",
    "prioritize_answer",
    "CombinedPreempt",
    "PreemptChain",
    "choose_binder",
    "bind_fallthrough",
    "COMBINED_TIMEOUT_MARGIN",
    "CombinedRefusal",
    "combined_timeout",
    "combined_entry",
    "combined_caveats",
]
