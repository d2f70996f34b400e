"""The Kubernetes CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go) for the fake API server's
admission policies: `quantity(string)`, `isQuantity(string)`, and on a quantity `compareTo`, `isLessThan`,
`isGreaterThan`, the part of it the chart's policies use. A quantity is compared by value, as the API server does
(`500m` equals `0.5`), so a policy that caps a resource is not fooled by how the amount is written."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

_FORM = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIX = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
           "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
_SUFFIX.update({s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))})


class Quantity(celtypes.StringType):
    """A resource.Quantity in CEL: its text, and its value."""

    value: Decimal


def _parse(text: str) -> Decimal | None:
    match = _FORM.match(text)
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * Decimal(10) ** int(suffix[1:])
        return Decimal(number) * _SUFFIX[suffix]
    except (InvalidOperation, ValueError):
        return None


def quantity(text: Any) -> Quantity | CELEvalError:
    value = _parse(str(text))
    if value is None:
        return CELEvalError(f"quantities must match the regular expression '{_FORM.pattern}': {text!r}")
    q = Quantity(str(text))
    q.value = value
    return q


def is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_parse(str(text)) is not None)


def _values(a: Any, b: Any) -> tuple[Decimal, Decimal] | CELEvalError:
    if not (isinstance(a, Quantity) and isinstance(b, Quantity)):
        return CELEvalError("no such overload: compareTo/isLessThan/isGreaterThan take two quantities")
    return a.value, b.value


def compare_to(a: Any, b: Any) -> celtypes.IntType | CELEvalError:
    values = _values(a, b)
    if isinstance(values, CELEvalError):
        return values
    return celtypes.IntType((values[0] > values[1]) - (values[0] < values[1]))


def is_less_than(a: Any, b: Any) -> celtypes.BoolType | CELEvalError:
    values = _values(a, b)
    return values if isinstance(values, CELEvalError) else celtypes.BoolType(values[0] < values[1])


def is_greater_than(a: Any, b: Any) -> celtypes.BoolType | CELEvalError:
    values = _values(a, b)
    return values if isinstance(values, CELEvalError) else celtypes.BoolType(values[0] > values[1])


FUNCTIONS: dict[str, Any] = {"quantity": quantity, "isQuantity": is_quantity, "compareTo": compare_to,
                             "isLessThan": is_less_than, "isGreaterThan": is_greater_than}
