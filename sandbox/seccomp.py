"""sandloop's seccomp rules on the host: Docker's copy of them, and what a helper says of its own.

Every sandbox runs under sandloop's seccomp filter (the rules and why:
:mod:`sandbox.helper.seccomp_rules`), installed by the in-sandbox helper on itself before it runs
any command (:mod:`sandbox.helper.confine`) — on Docker, on Kubernetes (where the pod keeps the
node's ``RuntimeDefault`` profile underneath), in an environment's setup. Docker containers are
also given the same rules as the engine's profile (:func:`no_setid_profile`, made from the same
table): the engine applies them to every process of the container, so they hold for what never
passes through the helper (an image probe, python3 being added to an image that lacks it, a
``docker exec``) and do not depend on what the image holds (a setup step of a root-owned checkout
could replace the image's python3, and with it the helper's interpreter).

:func:`require_filter` is the host's check of a helper's hello; :func:`describe` is doctor's line.
"""

from __future__ import annotations

import json
import platform
from typing import Any

from sandloop.errors import SandboxUnavailable

from .helper.seccomp_rules import ARCHES, RULES, arch_for
from .helper.wire import HelloResult

__all__ = ["describe", "no_setid_profile", "require_filter"]

# Docker's names of the ABIs each machine runs: the native one and its compat ones, which the
# engine filters by name with the same rules (the helper's own filter refuses them outright).
_DOCKER_ARCHES = {
    "x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
}
assert set(_DOCKER_ARCHES) == set(ARCHES)


def _bits(mask: int) -> list[int]:
    return [1 << n for n in range(mask.bit_length()) if mask >> n & 1]


def _profile_rules(runtime: str | None) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    whole: dict[int, list[str]] = {}  # errno -> calls refused whatever their arguments
    for rule in RULES:
        if runtime == "runsc" and rule.syscall == "clone3":
            # Debian's runsc (2022) answers EPERM where an OCI profile says ENOSYS (measured), so
            # glibc would not fall back to clone and no thread could start. The helper's own
            # filter, which gVisor applies as written, still answers ENOSYS.
            continue
        if rule.arg is None:
            whole.setdefault(rule.errno, []).append(rule.syscall)
            continue
        # One rule per bit: the arguments of one rule must all match, the rules of a call are
        # alternatives. MASKED_EQ: (argument & value) == valueTwo.
        rules += [{"names": [rule.syscall], "action": "SCMP_ACT_ERRNO", "errnoRet": rule.errno,
                   "args": [{"index": rule.arg, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]}
                  for bit in _bits(rule.mask)]
    rules += [{"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno} for errno, names in whole.items()]
    return rules


def no_setid_profile(runtime: str | None = None, machine: str | None = None) -> str:
    """The rules as the JSON text Docker's ``--security-opt seccomp=`` takes."""
    try:
        arches = _DOCKER_ARCHES[arch_for(machine or platform.machine()).name]
    except ValueError:
        arches = []  # the engine's own architecture, whatever it is: names resolve there too
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "architectures": arches, "syscalls": _profile_rules(runtime)}
    return json.dumps(profile, separators=(",", ":"))


def require_filter(hello: HelloResult, where: str) -> None:
    """SandboxUnavailable unless the helper says sandloop's filter is in force on it (a helper
    that could not install it refuses every request already; this holds the host to it too)."""
    status = hello.get("seccomp")
    if not status or status.get("filter") != "installed" or status.get("mode") != 2:
        raise SandboxUnavailable(f"{where}: the helper does not run under sandloop's seccomp filter ({status})")


def describe(hello: HelloResult | None) -> str:
    """One line for doctor: is the filter in force, and what the kernel says."""
    status = hello.get("seccomp") if hello else None
    if not status:
        return "unknown (no answer from a helper)"
    if status["filter"] != "installed":
        return "NOT in force: the helper runs without sandloop's seccomp filter"
    count = "" if status["filters"] is None else f", {status['filters']} filter(s) with the runtime's"
    return (f"sandloop's filter in force ({status['arch']}; setuid/setgid bits, namespaces, ptrace, "
            f"32-bit calls refused; kernel: Seccomp {status['mode']}{count})")
