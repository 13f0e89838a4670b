"""Schemathesis hooks for Ferry's local API: what no JSON Schema can say, applied to the cases
Schemathesis generates from docs/openapi.json (loaded by `run` through SCHEMATHESIS_HOOKS).

A valid value stays valid and an invalid one invalid (the patterns are read from the document
itself), with one exception: the placeholder Schemathesis sends for a request id it could not
draw, in a case it calls valid (see `adjusted`).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

import schemathesis

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())


def documented_pattern(parameter: str) -> re.Pattern[str]:
    return re.compile(DOCUMENT["components"]["parameters"][parameter]["schema"]["pattern"])


UUID7 = documented_pattern("RequestId")
# X-Ferry-Timeout's form, which a settle's `wait` takes too (besides `0`).
SECONDS = documented_pattern("Timeout")
# Inside the journal's retention (7 days by default) with a day to spare.
ID_AGE_WINDOW_MS = 6 * 86_400_000
# The longest a generated long poll may wait: the document allows a minute for the change feed
# and ten for a settle, which a bounded run cannot spend on one request.
LONGEST_WAIT_S = 0.5


def redated(request_id: str) -> str:
    """The same id, dated within the last six days of this machine's clock.

    A request id is valid only if its date (its first 48 bits) is neither older than the journal
    keeps nor minutes ahead of the gateway's clock, and no pattern can say "the last seven days";
    a generated id carries a random date, almost always outside. Its other bits, and so its
    shape, are kept, and so is its variety: the new age comes from the old date.
    """
    digits = request_id.replace("-", "")
    date_ms = int(time.time() * 1000) - int(digits[:12], 16) % ID_AGE_WINDOW_MS
    text = f"{date_ms:012x}{digits[12:]}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def fresh_request_id() -> str:
    """A UUIDv7 with the RFC 9562 variant, dated now."""
    text = f"{int(time.time() * 1000):012x}7{secrets.token_hex(2)[1:]}{8 + secrets.randbelow(4):x}{secrets.token_hex(8)[1:]}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def is_positive(case) -> bool:
    """Whether Schemathesis holds the server to accepting this case (`positive_data_acceptance`)."""
    return case.meta is not None and case.meta.generation.mode.is_positive


def header_name(headers: dict, wanted: str) -> str | None:
    return next((name for name in headers if name.lower() == wanted), None)


@schemathesis.hook
def map_case(context, case):
    """Every generated case (the coverage, fuzzing and stateful phases)."""
    return adjusted(case)


@schemathesis.hook
def before_add_examples(context, examples):
    """The examples phase's cases, which `map_case` does not see."""
    for case in examples:
        adjusted(case)


def adjusted(case):
    headers = case.headers
    if headers:
        name = header_name(headers, "x-ferry-request-id")
        if name is not None:
            value = headers[name]
            if isinstance(value, str) and UUID7.fullmatch(value):
                headers[name] = redated(value)
            elif is_positive(case):
                # Schemathesis 4.32 draws header values in its examples and coverage phases from
                # [A-Za-z0-9] only, so it has no value for this pattern (which needs '-') and
                # sends a placeholder (the number 0) in a case it calls schema-valid: give that
                # case a valid id instead.
                headers[name] = fresh_request_id()
    path_parameters = case.path_parameters
    if path_parameters and case.operation.path == "/v1/calls/{id}":
        value = path_parameters.get("id")
        if isinstance(value, str) and UUID7.fullmatch(value):
            path_parameters["id"] = redated(value)
    query = case.query
    if query and "wait" in query:
        query["wait"] = shortened_wait(case.operation.path, query["wait"])
    return case


def shortened_wait(path: str, wait):
    """A valid `wait` made at most LONGEST_WAIT_S; an invalid one untouched, so it stays invalid."""
    if path == "/v1/vaults/{vault}/changes":
        if isinstance(wait, (int, float)) and not isinstance(wait, bool) and LONGEST_WAIT_S < wait <= 60:
            return LONGEST_WAIT_S
    elif path == "/v1/calls/{id}":
        if isinstance(wait, str) and SECONDS.fullmatch(wait) and seconds(wait) > LONGEST_WAIT_S:
            return str(LONGEST_WAIT_S)
    return wait


def seconds(text: str) -> float:
    """A timeout's value (0 for a text with no digits, which a looser pattern could let by)."""
    try:
        return float(text)
    except ValueError:
        return 0.0
