"""TLS and SASL material of the Kafka listener: the users file, SCRAM credentials, the server TLS context.

**Users file** (``s3stream serve --sasl-users FILE``, ``sasl.users.file``): UTF-8 text, one ``user:password``
per line; the first ``:`` ends the user name (a password may contain ``:``; a name may not); blank lines and
lines starting with ``#`` are skipped; names are unique; neither part may be empty. Keep the file private
(``chmod 600``): a file other users can read is loaded with a warning.

**What is kept.** At load every password becomes one SCRAM credential per hash (RFC 5802/7677: a random
16-byte salt, :data:`SCRAM_ITERATIONS` PBKDF2 iterations, ``StoredKey`` and ``ServerKey``); the password
itself is dropped at once. A PLAIN login is checked by deriving the SCRAM-SHA-256 ``StoredKey`` of the
password it carries, so nothing reversible stays in memory. Passwords are their UTF-8 bytes, without
SASLprep, as Kafka does. Comparisons are constant-time. An unknown user goes through the same exchange
against a made-up credential (a salt stable per name), so replies do not tell which users exist.

**Never logged.** Passwords, proofs and keys appear in no message, exception or ``repr``;
:class:`AuthenticationFailed` messages name the mechanism only.

Salts, nonces and the made-up credentials come from :mod:`secrets`, on purpose not from the injectable
:class:`~s3stream.base.ids.IdSource`: that one is seedable for reproducible simulations, which security
material must never be.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import ssl
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from s3stream.base.errors import InvalidConfig

__all__ = ["MECHANISMS", "SCRAM_ITERATIONS", "AuthenticationFailed", "ScramCredential", "ScramExchange", "Users",
           "check_plain", "load_users", "parse_mechanisms", "parse_users", "scram_credential", "server_ssl_context"]

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
#: SCRAM mechanism -> hashlib name
SCRAM_HASHES: Mapping[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS: tuple[str, ...] = (PLAIN, *SCRAM_HASHES)
#: RFC 7677's minimum (Kafka's default); PLAIN logins pay one derivation of this cost each
SCRAM_ITERATIONS = 4096
_SALT_BYTES = 16
_NONCE_BYTES = 24
_MAX_AUTH_BYTES = 16 * 1024  # any real SASL message of these mechanisms is far smaller


class AuthenticationFailed(Exception):
    """A SASL exchange failed; the message is safe to send to the client and to log (no credentials)."""


# ------------------------------------------------------------------------------------------------ credentials


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a SCRAM server keeps of a password (RFC 5802 section 3): it cannot log in with it."""

    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


def _hmac(key: bytes, msg: bytes, algo: str) -> bytes:
    return hmac.new(key, msg, algo).digest()


def scram_credential(password: bytes, mechanism: str, *, salt: bytes | None = None,
                     iterations: int = SCRAM_ITERATIONS) -> ScramCredential:
    """The SCRAM credential of ``password`` for ``mechanism`` (a fresh random salt unless given)."""
    algo = SCRAM_HASHES[mechanism]
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(algo, password, salt, iterations)
    client_key = _hmac(salted, b"Client Key", algo)
    return ScramCredential(salt=salt, iterations=iterations, stored_key=hashlib.new(algo, client_key).digest(),
                           server_key=_hmac(salted, b"Server Key", algo))


class Users:
    """The SCRAM credentials of every user, by mechanism; its repr shows the count only."""

    def __init__(self, credentials: Mapping[str, Mapping[str, ScramCredential]]) -> None:
        self._credentials = {name: dict(by_mech) for name, by_mech in credentials.items()}
        self._fake_secret = secrets.token_bytes(32)
        self._fake_keys = {mech: (secrets.token_bytes(hashlib.new(a).digest_size),
                                  secrets.token_bytes(hashlib.new(a).digest_size))
                           for mech, a in SCRAM_HASHES.items()}

    def __len__(self) -> int:
        return len(self._credentials)

    def __contains__(self, name: object) -> bool:
        return name in self._credentials

    def __repr__(self) -> str:
        return f"Users({len(self)} users)"

    def credential(self, name: str, mechanism: str) -> tuple[ScramCredential, bool]:
        """``(credential, known)``: a made-up credential that no password matches when ``name`` is unknown."""
        found = self._credentials.get(name, {}).get(mechanism)
        if found is not None:
            return found, True
        stored, server = self._fake_keys[mechanism]
        salt = _hmac(self._fake_secret, f"{mechanism}\0{name}".encode(), "sha256")[:_SALT_BYTES]
        return ScramCredential(salt=salt, iterations=SCRAM_ITERATIONS, stored_key=stored, server_key=server), False


def parse_users(lines: Iterable[str], *, source: str = "the users file",
                iterations: int = SCRAM_ITERATIONS) -> Users:
    """:class:`Users` from ``user:password`` lines (see the module docstring); InvalidConfig names the line."""
    credentials: dict[str, dict[str, ScramCredential]] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, password = line.partition(":")
        name = name.strip()
        if not sep or not name or not password:
            raise InvalidConfig(f"{source} line {number}: expected user:password with neither part empty",
                                key="sasl.users.file")
        if name in credentials:
            raise InvalidConfig(f"{source} line {number}: user {name!r} is listed twice", key="sasl.users.file")
        secret = password.encode()
        credentials[name] = {mech: scram_credential(secret, mech, iterations=iterations) for mech in SCRAM_HASHES}
        del secret, password, line, raw
    if not credentials:
        raise InvalidConfig(f"{source} lists no users", key="sasl.users.file")
    return Users(credentials)


def load_users(path: str | Path) -> Users:
    """Read the users file at ``path`` (blocking: one PBKDF2 per user and hash)."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InvalidConfig(f"cannot read the SASL users file {file}: {exc.strerror or exc}",
                            key="sasl.users.file") from None
    except UnicodeDecodeError:
        raise InvalidConfig(f"the SASL users file {file} is not UTF-8 text", key="sasl.users.file") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the SASL users file %s can be read by other users (mode %o); chmod 600 it",
                    file, stat.S_IMODE(mode))
    return parse_users(text.splitlines(), source=f"the SASL users file {file}")


def parse_mechanisms(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"PLAIN,SCRAM-SHA-256"`` (or a sequence) -> the mechanisms, upper-cased; InvalidConfig for others."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        mech = item.strip().upper()
        if not mech:
            continue
        if mech not in MECHANISMS:
            raise InvalidConfig(f"SASL mechanism {item.strip()!r} is not supported (choose from "
                                f"{', '.join(MECHANISMS)})", key="sasl.enabled.mechanisms")
        if mech not in out:
            out.append(mech)
    return tuple(out)


# ------------------------------------------------------------------------------------------------ PLAIN


def check_plain(users: Users, message: bytes) -> str:
    """The user a SASL/PLAIN message (RFC 4616: ``authzid NUL user NUL password``) authenticates.

    Blocking (one PBKDF2). Raises AuthenticationFailed; an authzid other than the user itself is refused.
    """
    failed = AuthenticationFailed(f"Authentication failed: invalid credentials with SASL mechanism {PLAIN}")
    if len(message) > _MAX_AUTH_BYTES:
        raise failed
    parts = message.split(b"\0")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise AuthenticationFailed("Authentication failed: a SASL/PLAIN message is authzid NUL user NUL password")
    try:
        authzid, name = parts[0].decode(), parts[1].decode()
    except UnicodeDecodeError:
        raise failed from None
    if authzid and authzid != name:
        raise AuthenticationFailed("Authentication failed: the authorization id must be the user name")
    cred, known = users.credential(name, "SCRAM-SHA-256")
    stored = scram_credential(parts[2], "SCRAM-SHA-256", salt=cred.salt, iterations=cred.iterations).stored_key
    if not (hmac.compare_digest(stored, cred.stored_key) and known):
        raise failed
    return name


# ------------------------------------------------------------------------------------------------ SCRAM


def _attributes(text: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` -> [("a", "1"), ("b", "2")]; each attribute is one letter (or a Kafka extension name)."""
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise AuthenticationFailed("Authentication failed: malformed SCRAM message")
        out.append((key, value))
    return out


def _saslname(value: str) -> str:
    """RFC 5802 ``saslname``: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is malformed."""
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("Authentication failed: malformed SCRAM user name")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """The server side of one SCRAM-SHA-256/512 exchange (sans-IO): :meth:`first`, then :meth:`final`.

    Channel binding is not supported (``p=`` is refused; ``n`` and ``y`` are accepted), nor delegation
    tokens (Kafka's ``tokenauth`` extension). The client-final nonce must be the server's, or (for
    librdkafka before 2.6.1, kcat's included) the client's nonce followed by the server's. Its repr shows
    the mechanism and stage only.
    """

    def __init__(self, users: Users, mechanism: str) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._algo = SCRAM_HASHES[mechanism]
        self._users = users
        self._user: str | None = None
        self._known = False
        self._cred: ScramCredential | None = None
        self._gs2 = ""
        self._nonce = ""
        self._bare_nonce = ""  # the client's part
        self._auth_prefix = ""  # client-first-bare "," server-first

    def __repr__(self) -> str:
        return f"ScramExchange({self.mechanism}, {'after first' if self._cred else 'new'})"

    def _failed(self) -> AuthenticationFailed:
        return AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                    f"with SASL mechanism {self.mechanism}")

    def _text(self, message: bytes) -> str:
        if len(message) > _MAX_AUTH_BYTES:
            raise self._failed()
        try:
            return message.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: a SCRAM message is not UTF-8") from None

    def first(self, client_first: bytes) -> bytes:
        """The server-first-message for a client-first-message."""
        if self._cred is not None:
            raise AuthenticationFailed("Authentication failed: unexpected SCRAM client-first-message")
        text = self._text(client_first)
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            if flag.startswith("p="):
                raise AuthenticationFailed("Authentication failed: SCRAM channel binding is not supported")
            raise AuthenticationFailed("Authentication failed: malformed SCRAM client-first-message")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("Authentication failed: malformed SCRAM client-first-message")
        user = _saslname(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:]) != user):
            raise AuthenticationFailed("Authentication failed: the authorization id must be the user name")
        if any(key == "tokenauth" and value.lower() == "true" for key, value in attrs[2:]):
            raise AuthenticationFailed("Authentication failed: delegation tokens are not supported")
        client_nonce = attrs[1][1]
        if not client_nonce.isprintable() or not client_nonce.isascii():
            raise AuthenticationFailed("Authentication failed: malformed SCRAM nonce")
        self._cred, self._known = self._users.credential(user, self.mechanism)
        self._user = user
        self._gs2 = f"{flag},{authzid},"
        self._bare_nonce = client_nonce
        self._nonce = client_nonce + secrets.token_urlsafe(_NONCE_BYTES)
        server_first = (f"r={self._nonce},s={base64.b64encode(self._cred.salt).decode()},"
                        f"i={self._cred.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> tuple[str, bytes]:
        """``(user, server-final-message)`` for a client-final-message whose proof is right."""
        cred, user = self._cred, self._user
        if cred is None or user is None:
            raise AuthenticationFailed("Authentication failed: SCRAM client-final-message before client-first")
        self._cred = None  # one attempt per exchange
        text = self._text(client_final)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Authentication failed: malformed SCRAM client-final-message")
        attrs = _attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise AuthenticationFailed("Authentication failed: malformed SCRAM client-final-message")
        if not hmac.compare_digest(attrs[0][1].encode(), base64.b64encode(self._gs2.encode())):
            raise AuthenticationFailed("Authentication failed: SCRAM channel binding does not match")
        nonce = attrs[1][1].encode()
        # RFC 5802 wants the server's nonce back; librdkafka < 2.6.1 sends the client nonce before it once
        # more (librdkafka #4895; Kafka 3.8.1-3.9 accept it too). Both carry the server nonce: no replay.
        expected = self._nonce.encode()
        buggy = self._bare_nonce.encode() + expected
        if not (hmac.compare_digest(nonce, expected) | hmac.compare_digest(nonce, buggy)):
            raise AuthenticationFailed("Authentication failed: SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._failed() from None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        signature = _hmac(cred.stored_key, auth_message, self._algo)
        if len(proof) != len(signature):
            raise self._failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hmac.compare_digest(hashlib.new(self._algo, client_key).digest(), cred.stored_key)
        if not (ok and self._known):
            raise self._failed()
        server_signature = _hmac(cred.server_key, auth_message, self._algo)
        return user, b"v=" + base64.b64encode(server_signature)


# ------------------------------------------------------------------------------------------------ TLS


def server_ssl_context(certfile: str | Path, keyfile: str | Path | None = None,
                       cafile: str | Path | None = None) -> ssl.SSLContext:
    """A TLS 1.2+ server context from PEM files; with ``cafile``, clients must present a certificate it signed.

    Raises InvalidConfig naming the file that cannot be read or used.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(certfile), str(keyfile) if keyfile is not None else None,
                                password=_no_password)
    except (OSError, ssl.SSLError) as exc:
        files = f"{certfile}" + (f" and {keyfile}" if keyfile is not None else "")
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise InvalidConfig(f"cannot use the TLS certificate/key {files}: {reason} (PEM certificate chain and "
                            "an unencrypted PEM private key)", key="ssl.certfile") from None
    if cafile is not None:
        try:
            context.load_verify_locations(cafile=str(cafile))
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
            raise InvalidConfig(f"cannot use the TLS CA file {cafile}: {reason}", key="ssl.cafile") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _no_password() -> str:
    """An encrypted key fails at once instead of prompting on the terminal."""
    raise ssl.SSLError("the private key is encrypted")
