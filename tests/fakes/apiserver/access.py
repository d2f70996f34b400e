"""Who a request is (bearer tokens, service-account tokens bound to a node) and what may be asked of the fake API
server: the RBAC and the admission policies it enforces once a test loads them."""

from __future__ import annotations

from tests.fakes.apiserver.admission import ANONYMOUS, AdmissionPolicies, Identity, service_account
from tests.fakes.apiserver.objects import Obj
from tests.fakes.apiserver.rbac import Authorizer
from tests.fakes.apiserver.state import ClusterState


class Access(ClusterState):
    def add_token(self, token: str, identity: Identity) -> Identity:
        with self.lock:
            self.identities[token] = identity
        return identity

    def add_service_account_token(self, token: str, namespace: str, name: str, node: str | None = None,
                                  pod: str | None = None) -> Identity:
        """A projected service-account token of a pod on `node` (None: a token that names no node)."""
        return self.add_token(token, service_account(namespace, name, node, pod))

    def load_admission(self, manifests: list[Obj]) -> None:
        """Enforce the ValidatingAdmissionPolicies (and Bindings) among these manifests from now on."""
        policies = AdmissionPolicies(manifests)
        with self.lock:
            self.admission = policies

    def load_rbac(self, manifests: list[Obj]) -> None:
        """Authorize every request from now on against the Roles, ClusterRoles and bindings among these manifests
        (tests/fakes/apiserver/rbac.py): 403 Forbidden for what they do not grant, and every request must
        authenticate."""
        authorizer = Authorizer(manifests)
        with self.lock:
            self.rbac = authorizer

    def authenticate(self, authorization: str | None) -> Identity | None:
        """Who a request is, from its Authorization header; None: 401."""
        scheme, _, token = (authorization or "").partition(" ")
        with self.lock:
            if not self.token and not self.identities and self.rbac is None:
                return ANONYMOUS  # a cluster that knows no token checks none (the remediator tests)
            if scheme == "Bearer" and token in self.identities:
                return self.identities[token]
            if self.token and authorization == f"Bearer {self.token}":
                return Identity("test-user", ("system:authenticated",))
        return None
