"""A stateful fake Kubernetes API server over real HTTP (127.0.0.1, JSON), for the remediator's tests.

The official `kubernetes` client talks to it exactly as to a real API server. It keeps real state
and behaves like the API server where the remediator depends on it:
- nodes: list (label/field selectors), get, merge and strategic-merge PATCH with a resourceVersion
  precondition (409 Conflict on a stale one), PATCH nodes/status (conditions merged by type; as the API server's
  status strategy, spec is reset and metadata changes, labels and annotations, are kept); a Node or Pod write whose
  annotations total over 256 KiB is 422 Invalid, as apimachinery validates (tests/fakes/apiserver/validation.py);
- pods: list with field selectors (=, ==, !=), delete, and the Eviction subresource, which answers
  429 TooManyRequests when a PodDisruptionBudget allows no more disruptions. As on a real cluster an
  evicted or deleted pod is not gone at once: it gets a deletionTimestamp (Terminating) and
  disappears after its grace period (the pod's spec.terminationGracePeriodSeconds when given, else
  `pod_grace`: a short 1 s on the real clock; the remediator harness sets 30 s, the Kubernetes default,
  with `clock` on its injected clock); evicting a pod that is
  already terminating succeeds without touching PDBs; DELETE with gracePeriodSeconds=0 removes at once;
- events (create, list by involvedObject.name; 422 when the Event's namespace is not the involved
  object's, or "default" for cluster-scoped objects, as the API server validates);
- coordination.k8s.io/v1 Leases (create, get, replace with a resourceVersion precondition);
  batch/v1 Jobs (create, defaulted as the API server does before admission: tests/fakes/apiserver/defaults.py, and
  validated: 422 for a container, volume or mount path named twice, tests/fakes/apiserver/validation.py; get,
  list by label; 409 AlreadyExists; merge PATCH); a created Job counts one active pod, and
  the pod itself exists (with the kubelet's status: an image pull backing off, a refusal) only when a test plays the
  Job controller and the kubelet (`job_pod`, `job_makes_no_pod`); karpenter.sh/v1 NodeClaims (list, delete);
- pods: merge PATCH (annotations) with a resourceVersion precondition, seen by watches;
- fault injection: answer a matching request with an error status, or delay it (client timeouts), or kill the
  client at it (`crash_on`: the test's callback runs, the request is dropped unperformed and unanswered);
- `latency` (seconds, default 0): every request waits that long before it is served, a real API server's round
  trip (a watch once, at its start); `peak_in_flight` is the most requests it served at once (watches not counted);
- watches (`?watch=true`) on nodes and pods: ADDED/MODIFIED/DELETED as newline-delimited JSON from the
  given resourceVersion (an object entering or leaving a selector is ADDED or DELETED, as on a real API
  server), BOOKMARKs when asked for (as soon as the resourceVersion moves, and every `bookmark_interval`, 60 s,
  as a real API server's cacher does), `timeoutSeconds`, and an ERROR 410 Expired event when the
  resourceVersion is older than the `watch_history` kept, and `drop_watches` cuts every open watch off mid-stream
  (an API server restart), `silence_watches` leaves them open and silent (a peer gone without a word). Changes go
  through the API or the helpers
  (`add_node`, `add_pod`, `update_node`, `update_pod`): a test that edits `nodes[...]` in place is not seen
  by watches. `calls` counts requests by (verb, resource), as the API server's metrics do, `listed` the objects
  list answers carried; `queries` keeps
  each request's query parameters (`resourceVersion=0`, selectors).
- paged lists, as the API server serves them: `limit` cuts a list to that many objects (in key order) with a
  `continue` token; the next pages come from the list as it was at its resourceVersion, whatever changed
  meanwhile, with `remainingItemCount` when no selector was given; a token with a `resourceVersion` is a 400, an
  unreadable one a 400, and one whose revision was compacted (`compact`, or the history outgrowing
  `watch_history`) a 410 Expired; a token used again (a client's retry) serves the same page. Answers are written
  out under the lock, not copied first (a list of 30,000 real-size pods copied took a minute): the fake replaces a
  stored object on every change, never changes it in place, and a test should do the same;
- objects of real size (`real_objects.py`: `real_node`, `real_pod`, `fill`), for memory measurements;
- authentication: bearer tokens map to identities (`add_token`, `add_service_account_token`: a pod-bound
  service-account token carries its pod's node name, as on Kubernetes 1.30+). Once any token is known, a
  request without a known one gets 401 Unauthorized; a cluster that knows no token checks none (every
  request is anonymous), as the remediator tests expect;
- authorization: `load_rbac` takes rendered manifests and from then on authorizes every request against their
  Roles, ClusterRoles and bindings with the API server's RBAC semantics (tests/fakes/apiserver/rbac.py): 403 Forbidden
  in the API server's Status shape, every denial kept in `forbidden`; tests/support/chart_rbac.py loads the chart's (the
  remediator harness, ServeProcess and the e2e do so by default) with a token per ServiceAccount and a
  system:masters one for what a test does as a person;
- admission: `load_admission` takes rendered manifests and enforces their ValidatingAdmissionPolicies and
  Bindings on every write, with the policies' own CEL (tests/fakes/apiserver/admission.py); a node PATCH is admitted
  with the patched Node as `object` and the stored one as `oldObject`, as on the API server. A denial is
  the API server's Status (its reason and code, its "... denied request: ..." message).
- Dynamic Resource Allocation (`dra`, tests/fakes/apiserver/dra.py): ResourceSlices, ResourceClaims and DeviceTaintRules
  in resource.k8s.io, discovery of the versions served, and NoExecute device taints evicting the pods whose
  claims use the device, as kube-controller-manager does.
The kubernetes client sends POST bodies without Content-Type; as the API server does, we read JSON.
"""

from tests.fakes.apiserver.cluster import FakeCluster
from tests.fakes.apiserver.objects import Obj
from tests.fakes.apiserver.patches import merge_patch

__all__ = ["FakeCluster", "Obj", "merge_patch"]
