"""A compiled profile written back as TOML, every default filled in (``thread-client profile show``)."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from typing import Any

from ..limits.rules import ALGORITHMS
from .model import AnswerRule, Profile

__all__ = ["profile_toml"]

# Compiled fields that are no part of the file: where it came from, and where its rules stood.
_NOT_WRITTEN = {"line", "hook_dir", "statuses", "equals", "headers", "rules"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def profile_toml(profile: Profile) -> str:
    """``profile`` as a TOML document that reads back to the same profile."""
    lines = [f"# {profile.source}, with every default filled in", f"name = {_value(profile.name)}"]
    if profile.description:
        lines.append(f"description = {_value(profile.description)}")
    lines += ["", "[request]", *_fields(profile.request)]
    lines.append(f"headers = {{ {', '.join(f'{_key(n)} = {_value(v)}' for n, v in profile.request.headers)} }}"
                 if profile.request.headers else "headers = {}")
    nonce = _fields(profile.nonce)
    if profile.nonce.style == "none":  # nothing is sent: no place to name
        nonce = [line for line in nonce if not line.startswith(("param ", "header "))]
    lines += ["", "[nonce]", *nonce]
    if profile.sign is not None:
        lines += ["", "[sign]", *_fields(profile.sign)]
    lines += ["", "[answers]", f"message = {_value(profile.message_field)}"]
    for rule in profile.answers:
        lines += ["", "[[answers.rule]]", *_rule(rule)]
    if profile.settle is not None:
        lines += ["", "[settle]", *_fields(profile.settle)]
        for rule in profile.settle.rules:
            lines += ["", "[[settle.rule]]", *_rule(rule)]
    lines += ["", "[penalty]", *_fields(profile.penalty)]
    for limit in profile.limits:
        written = ("name", "algorithm", *ALGORITHMS[limit.algorithm], "scope", "cost")
        lines += ["", "[[limit]]", *(f"{name} = {_value(getattr(limit, name))}" for name in written[:-1])]
        cost = limit.cost
        lines.append(f"cost = {_value(cost)}" if isinstance(cost, (int, str)) else
                     f"cost = {{ {', '.join(f'{_value(endpoint)} = {value}' for endpoint, value in cost)} }}")
    return "\n".join(lines) + "\n"


def _fields(table: Any) -> list[str]:
    return [f"{field.name} = {_value(getattr(table, field.name))}" for field in fields(table)
            if field.name not in _NOT_WRITTEN]


def _rule(rule: AnswerRule) -> list[str]:
    low, high = rule.statuses
    lines = [f"status = {low}" if low == high else f"status = [{low}, {high}]"]
    # What a rule leaves at its default it does not read (no subject, no test, no retry time): not written.
    lines += [f"{field.name} = {_value(getattr(rule, field.name))}" for field in fields(rule)
              if field.name not in _NOT_WRITTEN and getattr(rule, field.name) != field.default]
    if rule.equals is not None:
        lines.append(f"equals = {_value(rule.equals)}")
    return lines


def _key(name: str) -> str:
    """A bare TOML key where it may be one (ASCII letters, digits, ``_`` and ``-``), else a quoted one."""
    return name if _BARE_KEY.fullmatch(name) else _value(name)


def _value(value: object) -> str:
    """A TOML scalar: a JSON string is a valid TOML basic string, and so are integers and booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)
