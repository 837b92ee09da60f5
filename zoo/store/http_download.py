"""One download over http(s) into a file, hashed as it streams: the attempt `download.fetch`
retries. The file appears at its place only complete and with the expected sha256 (the one
given, else one the server sends as ``X-Linked-Etag``/``ETag``)."""

from __future__ import annotations

import hashlib
import http.client
import re
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any, BinaryIO

from tqdm import tqdm

from zoo.errors import ChecksumError, DownloadError
from zoo.store.files import atomic_path

USER_AGENT = "zoo/0.1"
CHUNK_SIZE = 1 << 20  # 1 MiB, for hashing and for streaming downloads
SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_TIMEOUT_S = 60.0  # per socket operation, not for the whole transfer


class TransientError(Exception):
    """A download failure worth retrying (network error, 5xx, truncated transfer)."""


def describe_expected(expected: str) -> str:
    """An expected sha256 as messages name it: the digest, or ``prefix <hex>``."""
    return expected if len(expected) == 64 else f"prefix {expected}"


def download_once(url: str, target: Path, expected: str | None, progress: bool) -> tuple[str, str | None]:
    """One download attempt into a temporary file next to ``target``, renamed into place only
    once complete and verified. Returns the file's sha256 and the one it was checked against
    (``expected``, else a sha256 the server sent; None: the file is unverified). Raises
    TransientError for failures worth retrying, DownloadError or ChecksumError for the others."""
    response, redirects = _open(url)
    with response:
        if expected is None:
            chain = [response.headers, *reversed(redirects.redirect_headers)]
            expected = _sha256_from_headers(chain)
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        with atomic_path(target) as tmp:
            bar = tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=target.name, disable=not progress
            )
            with tmp.open("wb") as out, bar:
                got, received = _stream(response, out, bar, url)
            if total is not None and received != total:
                raise TransientError(
                    f"Could not download {url}: truncated transfer, received {received} of {total} bytes."
                )
            if expected is not None and not got.startswith(expected):
                raise ChecksumError(
                    f"Downloaded {url}, but its sha256 is {got}, not the expected "
                    f"{describe_expected(expected)}; nothing was saved. The server sent a different file "
                    "than the one published: check the URL and the expected sha256."
                )
    return got, expected


def _open(url: str) -> tuple[Any, _HeaderKeepingRedirectHandler]:
    """The response to GET ``url`` and the redirects that led to it; errors as `download_once` raises them."""
    redirects = _HeaderKeepingRedirectHandler()
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        return urllib.request.build_opener(redirects).open(request, timeout=_TIMEOUT_S), redirects
    except urllib.error.HTTPError as err:
        err.close()
        status = f"HTTP {err.code} {err.reason}"
        if err.code >= 500 or err.code in (408, 429):
            raise TransientError(f"Could not download {url}: {status}.") from err
        if err.code == 404:
            raise DownloadError(f"{url} was not found ({status}); check the URL.") from err
        raise DownloadError(f"Could not download {url}: {status}.") from err
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
        raise TransientError(f"Could not download {url}: {getattr(err, 'reason', err)}.") from err


def _stream(response: Any, out: BinaryIO, bar: tqdm, url: str) -> tuple[str, int]:
    """Copy the response body into ``out``; its sha256 and length."""
    digest = hashlib.sha256()
    received = 0
    while True:
        try:
            chunk = response.read(CHUNK_SIZE)
        except (OSError, http.client.HTTPException) as err:
            raise TransientError(
                f"Could not download {url}: the connection failed after {received} bytes ({err})."
            ) from err
        if not chunk:
            return digest.hexdigest(), received
        out.write(chunk)
        digest.update(chunk)
        received += len(chunk)
        bar.update(len(chunk))


def _sha256_from_headers(headers: list[Message]) -> str | None:
    """A sha256 sent as ``X-Linked-Etag`` (preferred) or ``ETag`` by any response in the
    redirect chain; Hugging Face serves LFS files this way."""
    for field in ("X-Linked-Etag", "ETag"):
        for message in headers:
            value = (message.get(field) or "").strip()
            value = value.removeprefix("W/").strip('"')
            if SHA256_HEX.fullmatch(value):
                return value.lower()
    return None


class _HeaderKeepingRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows redirects, keeping each redirect response's headers (Hugging Face puts
    ``X-Linked-Etag`` on the redirect, not on the CDN's final response)."""

    def __init__(self) -> None:
        self.redirect_headers: list[Message] = []

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        self.redirect_headers.append(headers)
        return super().redirect_request(req, fp, code, msg, headers, newurl)
