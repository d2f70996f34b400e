"""The readings (keys.Reading) of values that must have the form another system gives them: Kubernetes names,
labels, selectors and quantities, Prometheus alert names, Alertmanager URLs."""

from __future__ import annotations

import re

from gpuhealth.remediator.policy.keys import Several
from gpuhealth.remediator.policy.reader import YamlReader
from gpuhealth.remediator.policy.readings import checked, optional_string, string

# A DNS subdomain (RFC 1123), what Kubernetes takes as the name of a RuntimeClass, PriorityClass or Secret.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A resource name (cpu, memory, nvidia.com/gpu) and a quantity (100m, 1.5, 64Mi, 1e3), as a pod spec takes them.
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_LABEL_TERM = re.compile(r"^[A-Za-z0-9_./-]+(=|==|!=)[A-Za-z0-9_.-]*$|^!?[A-Za-z0-9_./-]+$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z][A-Za-z0-9_.-]*$")
ALERT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY = _QUALIFIED_NAME  # a Kubernetes label key: an optional DNS prefix and a name


def _is_object_name(name: str | None) -> bool:
    return name is None or (len(name) <= 253 and bool(_SUBDOMAIN.match(name)))


def _not_an_object_name(name: str | None) -> str:
    return f"{name!r} is not a Kubernetes object name (lower case letters, digits, '-' and '.')"


object_name = checked(string, _is_object_name, _not_an_object_name)
optional_object_name = checked(optional_string, _is_object_name, _not_an_object_name)

# A label value gpuhealth sets in place of "true" (which would not stop the operand).
label_value = checked(string, lambda v: v != "true" and len(v) <= 63 and bool(_LABEL_NAME.fullmatch(v)),
                      lambda v: f"{v!r} must be a label value other than \"true\" (up to 63 letters, digits, '-', "
                                "'_' or '.')")
qualified_name = checked(string, lambda v: bool(_QUALIFIED_NAME.match(v)),
                         lambda v: f"{v!r} is not a qualified name (prefix/name, as a label key)")


# A GPU Operator operand's name makes its node label: nvidia.com/gpu.deploy.<name>, whose name part is a label name.
OPERAND_LABEL_PREFIX = "nvidia.com/gpu.deploy."
operand_name = checked(string, lambda n: bool(_LABEL_NAME.fullmatch(n)) and len(f"gpu.deploy.{n}") <= 63,
                       lambda n: f"{n!r} does not make a label key {OPERAND_LABEL_PREFIX}<name>")


def label_selector(r: YamlReader, key: str, value: object) -> str | None:
    """An equality-based label selector (team=ml,gpuhealth.io/watch), or null."""
    selector = optional_string(r, key, value)
    if selector is not None and not all(_LABEL_TERM.match(t.strip()) for t in selector.split(",")):
        raise r.fail(key, f"expected a label selector like team=ml,gpuhealth.io/watch, got {selector!r}")
    return selector


def node_selectors(r: YamlReader, key: str, value: object) -> tuple[dict[str, str], ...]:
    """A list of label selectors, each a non-empty mapping of label: value; null: none."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail(key, "expected a list of label selectors (mappings of label: value)")
    for item in value:
        if not isinstance(item, dict) or not item or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in item.items()):
            raise r.fail(key, f"each selector must be a non-empty mapping of label: \"value\", got {item!r}")
    return tuple(dict(item) for item in value)


def pod_labels(r: YamlReader, key: str, value: object) -> tuple[tuple[str, str], ...]:
    """A mapping of label: value (sorted pairs), or null: none."""
    labels = {} if value is None else value
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise r.fail(key, "expected a mapping of label: value (the operand's pods), or none")
    return tuple(sorted(labels.items()))


def resources(r: YamlReader, key: str, value: object) -> dict[str, dict[str, str]]:
    """A container's resources: {requests: {name: quantity}, limits: {name: quantity}}."""
    out: dict[str, dict[str, str]] = {}
    for part, amounts in r.section(key, {"requests", "limits"}, value).items():
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            raise r.fail(f"{key}.{part}", f"expected a mapping of resource: quantity (cpu: 100m, memory: 256Mi), "
                         f"got {amounts!r}")
        checked_amounts = {name: _quantity(r, f"{key}.{part}", name, amount) for name, amount in amounts.items()}
        if checked_amounts:
            out[part] = checked_amounts
    return out


def _quantity(r: YamlReader, key: str, name: object, amount: object) -> str:
    if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
        raise r.fail(key, f"{name!r} is not a resource name (cpu, memory, ephemeral-storage, ...)")
    text = str(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) else amount
    if not isinstance(text, str) or not _QUANTITY.match(text):
        raise r.fail(f"{key}.{name}", f"expected a quantity like 100m, 1.5 or 256Mi, got {amount!r}")
    return text


def alertmanager_urls(r: YamlReader, key: str, value: object) -> Several:
    """An http(s) URL, a list of them (an HA Alertmanager: `url` is the first, `peers` all), or none (silences
    deliberately not checked)."""
    urls = value if isinstance(value, list) else [value]
    if not urls:
        raise r.fail(key, "expected an http(s) URL, a list of them (an HA Alertmanager), or none")
    checked_urls = []
    for url in urls:
        url = r.string(key, url, optional=len(urls) == 1)
        if url is not None and (url != "none" or len(urls) > 1) and not re.match(r"^https?://", url):
            raise r.fail(key, f"expected an http(s) URL or none, got {url!r}")
        checked_urls.append(url.rstrip("/") if url else None)
    first = Several(url=checked_urls[0])
    return first if len(checked_urls) == 1 else Several(first, peers=tuple(u for u in checked_urls if u))
