"""A client for Ferry's local API, for apps written in Python (standard library only).

Every write ends as exactly one of these, and the type says which (SPEC 5):

- ``Done``: the owner carried it out (``revision``).
- ``Refused``: the owner answered and did not carry it out (``conflict``, ``busy``, ...).
  ``busy`` and ``rate_limited`` may be sent again with the same request id after
  ``retry_after_s``. (A ``busy`` with reason ``caller_cap``, ``saturated`` or
  ``background_full`` and a detail ending "nothing was sent" came from the local gateway,
  which keeps the owner's cap for this app, or what the loaded owner last took of this
  machine's writes of the class: not carried out either, and sent again the same way.)
- ``NotCarriedOut``: the request left, the connection broke, and the owner confirmed it never
  ran and never will: send it again under a new request id.
- ``Unavailable``: the local gateway did not send it (no route, owner down): nothing was sent.
- ``OutcomeUnknown``: the request may have reached the owner and no answer came back. Settle
  it with ``settle(request_id, vault=...)``; never send it again under a new id.
- ``Invalid``: the local gateway refused it before sending anything (bad input, unknown vault).
- ``LocalGatewayDown``: the local gateway could not be reached: not a byte of the request left
  this process. Nothing was written.

The client makes the request id (a UUIDv7) before anything is sent, so an ``OutcomeUnknown``
can always be settled. It opens one connection per call and tells "could not connect" (nothing
was sent) from "the connection broke after it was made" (a byte may have left): a pooled
client cannot tell those apart, which is how an app gets told "nothing was sent" for a write
that was carried out.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

__all__ = [
    "Client",
    "Done",
    "Refused",
    "NotCarriedOut",
    "Unavailable",
    "OutcomeUnknown",
    "Invalid",
    "LocalGatewayDown",
    "WriteResult",
    "SettledDone",
    "SettledRefused",
    "SettledNotCarriedOut",
    "StillRunning",
    "SettleUnavailable",
    "NeverSent",
    "Settlement",
    "Record",
    "Change",
    "ChangePage",
    "FerryError",
    "GatewayDown",
    "new_request_id",
]

#: Seconds a call may take when the app gives none (SPEC 5).
DEFAULT_TIMEOUT_S = 30.0
#: The longest timeout the gateway accepts.
MAX_TIMEOUT_S = 600.0
#: How much longer than its own timeout the client waits for the gateway's answer.
CLIENT_GRACE_S = 5.0


# --- What a write ended as -------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    revision: int
    request_id: str


@dataclass(frozen=True)
class Refused:
    status: int
    error: str
    detail: str
    request_id: str
    current_revision: Optional[int] = None
    retry_after_s: Optional[int] = None

    def may_resend_after_s(self) -> Optional[float]:
        """When ``busy`` or ``rate_limited`` (not carried out; the same id may be sent again):
        seconds to wait first. ``None`` otherwise: it must not be sent again as it is."""
        if self.error in ("busy", "rate_limited"):
            return float(self.retry_after_s if self.retry_after_s is not None else 1)
        return None


@dataclass(frozen=True)
class NotCarriedOut:
    request_id: str
    reason: str
    detail: str


@dataclass(frozen=True)
class Unavailable:
    request_id: str
    detail: str


@dataclass(frozen=True)
class OutcomeUnknown:
    request_id: str
    vault: str
    owner: Optional[str]
    detail: str


@dataclass(frozen=True)
class Invalid:
    status: int
    error: str
    detail: str


@dataclass(frozen=True)
class LocalGatewayDown:
    detail: str


WriteResult = Union[Done, Refused, NotCarriedOut, Unavailable, OutcomeUnknown, Invalid, LocalGatewayDown]


# --- What the owner says became of a write ---------------------------------------------------


@dataclass(frozen=True)
class SettledDone:
    revision: int


@dataclass(frozen=True)
class SettledRefused:
    status: int
    error: str
    detail: str


@dataclass(frozen=True)
class SettledNotCarriedOut:
    reason: str


@dataclass(frozen=True)
class StillRunning:
    """Still running at the owner, or on its way there: ask again."""


@dataclass(frozen=True)
class SettleUnavailable:
    """The owner (or this machine's gateway) could not be asked now: the outcome is still
    unknown. Ask again later; never treat it as "nothing was written"."""

    detail: str


@dataclass(frozen=True)
class NeverSent:
    """The local gateway never sent a write with that id (and was not told its vault)."""

    detail: str


Settlement = Union[SettledDone, SettledRefused, SettledNotCarriedOut, StillRunning, SettleUnavailable, NeverSent]


# --- Reads -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    value: bytes
    revision: int
    #: ``local``, ``cache``, ``owner`` or ``replica:LABEL``.
    source: str
    #: The answer may be behind the owner.
    stale: bool


@dataclass(frozen=True)
class Change:
    key: str
    revision: int
    deleted: bool


@dataclass(frozen=True)
class ChangePage:
    changes: List[Change]
    #: Ask again with ``after=next``.
    next: int
    more: bool
    vault_revision: int


class FerryError(Exception):
    """A call other than a write that the gateway answered with an error. Safe to repeat."""

    def __init__(self, status: int, error: str, detail: str):
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail


class GatewayDown(Exception):
    """A call other than a write could not reach the local gateway, or broke off. Safe to
    repeat (reads and queries change nothing)."""


# --- The client ------------------------------------------------------------------------------


def new_request_id() -> str:
    """A UUIDv7: 48 bits of Unix milliseconds, then random bits (RFC 9562)."""
    ms = time.time_ns() // 1_000_000
    raw = bytearray(ms.to_bytes(6, "big") + secrets.token_bytes(10))
    raw[6] = (raw[6] & 0x0F) | 0x70
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _segment(text: str) -> str:
    """Escapes everything but ASCII letters, digits, ``-``, ``_`` and ``~`` (so a key with ``/``
    or ``.`` is always exactly one path segment), as the Rust kit does."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char.isascii() and (char.isalnum() or char in "-_~"):
            out.append(char)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def _header_safe(text: str) -> bool:
    """Whether ``text`` can be a header value as it is: printable ASCII (spaces inside)."""
    return bool(text) and all(" " <= char <= "~" for char in text) and text.strip() == text


def _query(pairs: List[Tuple[str, str]]) -> str:
    return "?" + "&".join(f"{name}={_segment(value)}" for name, value in pairs) if pairs else ""


def _timeout_text(seconds: float) -> str:
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout {seconds} s: must be greater than 0 and at most {MAX_TIMEOUT_S}")
    return f"{max(seconds, 0.001):.3f}"


def default_home() -> Path:
    """The gateway's default state directory on this platform (as ``ferry serve`` picks it)."""
    if os.environ.get("FERRY_HOME"):
        return Path(os.environ["FERRY_HOME"])
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", "~")).expanduser() / "ferry"
    if os.uname().sysname == "Darwin":
        return Path("~/Library/Application Support/ferry").expanduser()
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "ferry"


class _Broken(Exception):
    """The connection was made and broke before a whole answer came: a byte may have left."""


class _Down(Exception):
    """Nothing left this process: no address, no token, or the connect failed."""


class Client:
    """Calls one gateway's local API as ``app``.

    ``Client(app="notes-app")`` finds the gateway through its state directory (``home``,
    ``FERRY_HOME``, or the platform default): ``api.addr`` and ``local-token``, read at each
    call, so a restarted gateway on a new port is found. Or pass ``address`` (``HOST:PORT``)
    and ``token``.
    """

    def __init__(
        self,
        app: str,
        home: Optional[os.PathLike] = None,
        address: Optional[str] = None,
        token: Optional[str] = None,
    ):
        self.app = app
        self.home = Path(home) if home is not None else default_home()
        self._address = address
        self._token = token

    # -- Writes --

    def put(
        self,
        vault: str,
        key: str,
        value: Union[bytes, str],
        *,
        if_revision: Optional[int] = None,
        request_id: Optional[str] = None,
        timeout_s: Optional[float] = None,
        background: bool = False,
    ) -> WriteResult:
        return self._write("PUT", vault, key, value, if_revision, request_id, timeout_s, background)

    def delete(
        self,
        vault: str,
        key: str,
        *,
        if_revision: Optional[int] = None,
        request_id: Optional[str] = None,
        timeout_s: Optional[float] = None,
        background: bool = False,
    ) -> WriteResult:
        return self._write("DELETE", vault, key, b"", if_revision, request_id, timeout_s, background)

    def _write(self, method, vault, key, body, if_revision, request_id, timeout_s, background) -> WriteResult:
        request_id = request_id or new_request_id()
        # What cannot go in a request is refused here, before anything is sent: a failure of
        # http.client's own checks later could not be told from a broken connection.
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not isinstance(body, (bytes, bytearray, memoryview)):
            return Invalid(400, "bad_request", f"a value is bytes (or str), not {type(body).__name__}; nothing was sent")
        for name, text in (("request id", request_id), ("app name", self.app)):
            if not _header_safe(text):
                return Invalid(400, "bad_request", f"the {name} {text!r} is not printable ASCII; nothing was sent")
        headers = {"X-Ferry-Request-Id": request_id}
        try:
            if timeout_s is not None:
                headers["X-Ferry-Timeout"] = _timeout_text(timeout_s)
        except ValueError as err:
            return Invalid(400, "bad_request", f"{err}; nothing was sent")
        if if_revision is not None:
            headers["If-Match"] = str(if_revision)
        if background:
            headers["X-Ferry-Class"] = "background"
        bound = (timeout_s or DEFAULT_TIMEOUT_S) + CLIENT_GRACE_S
        try:
            status, answer_headers, data = self._call(
                method, f"/v1/vaults/{_segment(vault)}/records/{_segment(key)}", headers, body, bound
            )
        except _Down as err:
            return LocalGatewayDown(str(err))
        except _Broken as err:
            # A byte may have reached the gateway: from here on, never "nothing was sent".
            return OutcomeUnknown(
                request_id,
                vault,
                None,
                f"the call to the local gateway ended without an answer ({err}); settle it by its request id",
            )
        return _write_result(status, answer_headers, data, request_id, vault)

    # -- Settling --

    def settle(self, request_id: str, *, vault: Optional[str] = None, wait_s: Optional[float] = None) -> Settlement:
        """What became of the write ``request_id``. ``vault`` lets the gateway ask the owner even
        if it has no memory of the call; ``wait_s`` waits while the owner says it is running."""
        pairs = []
        if vault is not None:
            pairs.append(("vault", vault))
        if wait_s:
            pairs.append(("wait", f"{min(max(wait_s, 0.001), MAX_TIMEOUT_S):.3f}"))
        try:
            status, _, data = self._call("GET", f"/v1/calls/{_segment(request_id)}{_query(pairs)}", {}, b"", (wait_s or 0) + 60)
        except (_Down, _Broken) as err:
            # A gateway that cannot be asked says nothing about the write.
            return SettleUnavailable(f"{err}; the write's outcome is still unknown: settle it again later")
        body = _json(status, data)
        if status == 200:
            state = body.get("state")
            if state == "done":
                if body.get("status") == 200 and body.get("revision") is not None:
                    return SettledDone(body["revision"])
                return SettledRefused(body.get("status") or 0, body.get("error") or "other", body.get("detail") or "")
            if state == "not_carried_out":
                return SettledNotCarriedOut(body.get("reason") or "")
            return StillRunning()
        if status == 503:
            return SettleUnavailable(body.get("detail", ""))
        if status == 404 and body.get("error") == "unknown_call":
            return NeverSent(body.get("detail", ""))
        raise FerryError(status, body.get("error", "other"), body.get("detail", ""))

    # -- Reads --

    def get(self, vault: str, key: str, *, timeout_s: Optional[float] = None) -> Optional[Record]:
        """The record, or ``None`` if the vault has no such key."""
        headers = {} if timeout_s is None else {"X-Ferry-Timeout": _timeout_text(timeout_s)}
        status, answer_headers, data = self._read(
            f"/v1/vaults/{_segment(vault)}/records/{_segment(key)}", headers, (timeout_s or DEFAULT_TIMEOUT_S) + CLIENT_GRACE_S
        )
        if status == 200:
            return Record(
                value=data,
                revision=int(answer_headers.get("x-ferry-revision", "0")),
                source=answer_headers.get("x-ferry-source", ""),
                stale=answer_headers.get("x-ferry-stale", "false") == "true",
            )
        body = _json(status, data)
        if status == 404 and body.get("error") == "not_found":
            return None
        raise FerryError(status, body.get("error", "other"), body.get("detail", ""))

    def list(self, vault: str, *, prefix: str = "", limit: Optional[int] = None, after: Optional[str] = None) -> dict:
        pairs = [("prefix", prefix)] if prefix else []
        if limit is not None:
            pairs.append(("limit", str(limit)))
        if after is not None:
            pairs.append(("after", after))
        return self._read_json(f"/v1/vaults/{_segment(vault)}/records{_query(pairs)}")

    def changes(self, vault: str, *, after: int = 0, limit: Optional[int] = None, wait_s: Optional[float] = None) -> ChangePage:
        """The changes after revision ``after`` in this gateway's copy; with ``wait_s``, waits up
        to that long for the first one (a long poll)."""
        pairs = [("after", str(after))]
        if limit is not None:
            pairs.append(("limit", str(limit)))
        if wait_s:
            pairs.append(("wait", f"{wait_s:.3f}"))
        body = self._read_json(f"/v1/vaults/{_segment(vault)}/changes{_query(pairs)}", bound=(wait_s or 0) + 60)
        return ChangePage(
            changes=[Change(c["key"], c["revision"], c["deleted"]) for c in body["changes"]],
            next=body["next"],
            more=body["more"],
            vault_revision=body["vault_revision"],
        )

    def status(self) -> dict:
        return self._read_json("/v1/status")

    # -- HTTP --

    def _read_json(self, path: str, bound: float = 60.0):
        status, _, data = self._read(path, {}, bound)
        body = _json(status, data)
        if status != 200:
            raise FerryError(status, body.get("error", "other"), body.get("detail", ""))
        return body

    def _read(self, path, headers, bound):
        try:
            return self._call("GET", path, headers, b"", bound)
        except (_Down, _Broken) as err:
            raise GatewayDown(str(err)) from None

    def _endpoint(self) -> Tuple[str, int, str]:
        address = self._address
        if address is None:
            try:
                address = (self.home / "api.addr").read_text().strip()
            except OSError:
                raise _Down(
                    f"no gateway answers for {self.home} (it has not written api.addr); start it with "
                    f"`ferry serve`; nothing was sent"
                ) from None
        token = self._token
        if token is None:
            try:
                token = (self.home / "local-token").read_text().strip()
            except OSError as err:
                raise _Down(f"cannot read the gateway's token ({err}); nothing was sent") from None
        host, _, port = address.rpartition(":")
        try:
            return host.strip("[]"), int(port), token
        except ValueError:
            raise _Down(f"api.addr holds {address!r}, not HOST:PORT; nothing was sent") from None

    def _call(self, method, path, headers, body, bound):
        host, port, token = self._endpoint()
        connection = http.client.HTTPConnection(host, port, timeout=bound)
        try:
            try:
                connection.connect()
            except OSError as err:
                raise _Down(f"cannot connect to the gateway at {host}:{port} ({err}); nothing was sent") from None
            all_headers = {
                "Authorization": f"Bearer {token}",
                "X-Ferry-App": self.app,
                "Content-Length": str(len(body)),
                **headers,
            }
            try:
                connection.request(method, path, body=body, headers=all_headers)
                response = connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as err:
                raise _Broken(str(err) or type(err).__name__) from None
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()


def _json(status: int, data: bytes) -> dict:
    try:
        body = json.loads(data)
    except ValueError:
        return {"error": "other", "detail": f"the gateway answered {status} without Ferry's error body"}
    return body if isinstance(body, dict) else {"error": "other", "detail": str(body)}


def _write_result(status, headers, data, request_id, vault) -> WriteResult:
    """The one place a write's answer becomes a result. Anything not recognised is
    ``OutcomeUnknown``: the client never guesses that nothing happened."""

    def unknown(detail):
        return OutcomeUnknown(request_id, vault, None, detail)

    try:
        body = json.loads(data)
    except ValueError:
        return unknown(f"the gateway answered {status} without a JSON body; settle it by its request id")
    if not isinstance(body, dict):
        return unknown(f"the gateway answered {status} with {body!r}; settle it by its request id")
    if status == 200:
        if isinstance(body.get("revision"), int):
            return Done(body["revision"], request_id)
        return unknown("the gateway answered 200 without a revision; settle it by its request id")
    error, detail = body.get("error"), body.get("detail", "")
    retry = headers.get("retry-after")
    retry_after_s = int(retry) if retry and retry.strip().isdigit() else None
    if status == 503 and error == "not_carried_out":
        return NotCarriedOut(request_id, body.get("reason", ""), detail)
    if status == 503 and error == "unavailable":
        return Unavailable(request_id, detail)
    if status == 502 and error == "outcome_unknown":
        return OutcomeUnknown(request_id, vault, body.get("owner"), detail)
    if (status, error) in ((400, "bad_request"), (400, "stale_request_id"), (401, "unauthorized"), (404, "unknown_vault"), (409, "vault_ambiguous")):
        return Invalid(status, error, detail)
    if error in ("conflict", "not_found", "forbidden", "rate_limited", "busy", "ticket_refused", "refused"):
        return Refused(status, error, detail, request_id, body.get("current_revision"), retry_after_s)
    # A code this client does not know, or an internal error: it cannot say nothing ran.
    return unknown(f"the gateway answered {status} {error}: {detail}; settle it by its request id")
