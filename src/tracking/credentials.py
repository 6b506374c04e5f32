"""Credentials never on disk, never printed: a tracking URI's secrets, found and masked.

Hydra writes the command line to disk before any code of ours runs, and MLflow prints the URI; so a
URI with `user:password@` or a secret query parameter (`?token=...`) is refused (`refuse_credentials`,
`Store.connect`), and every URI a message shows goes through `redact_uri`. MLflow reads credentials
from the environment (CREDENTIAL_ENV) instead. Torch-free and MLflow-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# The userinfo of a URI (`user:password@`, `token@`): never on disk, never printed.
_USERINFO = re.compile(r"(://)[^/@\s]+@")
# A query parameter of a URI (`?token=...`, `&password=...`): its name, then its value.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#\s?/]+)=([^&;#\s'\"]*)")
# Query parameters whose value is a secret, by name (lower case, `-` read as `_`): exact names, then endings.
SECRET_PARAMS = frozenset({"pwd", "passwd", "auth", "sig", "signature", "credential", "credentials", "apikey", "key"})
SECRET_PARAM_ENDINGS = ("token", "password", "secret", "api_key", "apikey", "access_key", "private_key")
REDACTED = "***"


def is_secret_param(name: str) -> bool:
    """Whether a URI query parameter named `name` carries a secret (`token`, `access_token`, `password`, ...)."""
    key = unquote(name).lower().replace("-", "_")
    return key in SECRET_PARAMS or key.endswith(SECRET_PARAM_ENDINGS)


def _secret_params(text: str) -> list[str]:
    return [m.group(2) for m in _QUERY_PARAM.finditer(text) if is_secret_param(m.group(2))]


def _mask_secret_params(text: str) -> str:
    def mask(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}={REDACTED}" if is_secret_param(m.group(2)) else m.group(0)

    return _QUERY_PARAM.sub(mask, text)


def redact_text(text: str) -> str:
    """`text` (a command line, a list of overrides) with every URI's `user:password@` removed and the
    values of its secret query parameters (`?token=...`) masked."""
    return _mask_secret_params(_USERINFO.sub(r"\1", text))


def redact_uri(uri: str) -> str:
    """`uri` without the user name and password (`http://user:pw@host` -> `http://host`) and with the
    values of secret query parameters masked (`?token=abc` -> `?token=***`)."""
    parts = urlsplit(uri)
    if "@" in parts.netloc:  # rebuilt only then: urlunsplit would turn sqlite://// into sqlite://
        uri = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return _mask_secret_params(uri)


def has_credentials(text: str) -> bool:
    return _USERINFO.search(text) is not None or bool(_secret_params(text))


def credentials_error(where: str) -> str:
    return (
        f"{where}: credentials in the tracking URI (`user:password@`, or a query parameter such as `?token=`, "
        "`?password=`) would be written to disk (Hydra saves the command line) and printed; remove them and set "
        f"{CREDENTIAL_ENV[0]} and {CREDENTIAL_ENV[1]} (or {CREDENTIAL_ENV[2]}) in the environment instead"
    )


def refuse_credentials(arguments: Sequence[str]) -> None:
    """Stop before Hydra starts when a command-line argument holds a URI with credentials."""
    for argument in arguments:
        if has_credentials(argument):
            raise SystemExit("config error: " + credentials_error(redact_text(argument)))
