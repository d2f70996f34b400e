"""What `helm test` checks, from a pod of its own (the chart's templates/tests/remediator-test.yaml):

    python -m gpuhealth.remediator.install_check --webhook http://<release>-remediator.<ns>.svc:8080/alerts \\
        --ready http://<release>-remediator.<ns>.svc:9096/readyz

- the webhook refuses a post without the token: 401 (any other answer, a 2xx above all, fails: whoever reaches
  the port could then record alerts on the Nodes);
- the remediator is Ready: /readyz answers 200 (the Service sends to ready replicas only, so an answer at all
  also says one is).

Exit 0 when both hold, else 1, with one line per check on stdout. Only the standard library: it runs in the
remediator's image, with no token and no access to the Kubernetes API.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

TIMEOUT = 10.0  # seconds per request: a remediator that takes longer to answer a probe is not healthy either


def _status(request: urllib.request.Request, timeout: float) -> int | str:
    """The HTTP status of the answer, or why there was none."""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        return f"no answer ({getattr(exc, 'reason', exc)})"


def check_webhook(url: str, timeout: float = TIMEOUT) -> str | None:
    """None when a post without the token is refused 401; else what went wrong."""
    request = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    status = _status(request, timeout)
    if status == 401:
        return None
    if isinstance(status, int) and 200 <= status < 300:
        return f"POST {url} without the token was accepted ({status}): the webhook does not check the token"
    return f"POST {url} without the token: expected 401, got {status}"


def check_ready(url: str, timeout: float = TIMEOUT) -> str | None:
    """None when the readiness endpoint answers 200; else what went wrong."""
    status = _status(urllib.request.Request(url), timeout)
    return None if status == 200 else f"GET {url}: expected 200 (Ready), got {status}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuhealth.remediator.install_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--webhook", required=True, help="the webhook's URL (POST /alerts), through the Service")
    p.add_argument("--ready", required=True, help="the readiness URL (GET /readyz), through the Service")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per request")
    args = p.parse_args(argv)
    failures = 0
    for name, problem in (("webhook refuses a post without the token", check_webhook(args.webhook, args.timeout)),
                          ("remediator is Ready", check_ready(args.ready, args.timeout))):
        print(f"{'ok' if problem is None else 'FAILED'}: {name}{'' if problem is None else ': ' + problem}")
        failures += problem is not None
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
