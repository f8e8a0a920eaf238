"""Publishing every chain's signed document to a static host and to S3-compatible object storage
(docs/publishing.md).

- **Where**: ``<PUBLISH_DIRECTORY>/api/v1/chains/<name>`` and the object
  ``<PUBLISH_S3_PREFIX>/api/v1/chains/<name>`` in ``PUBLISH_S3_BUCKET``: the read API's path, so
  a static web server (or the bucket, or a CDN before either) serves each document where the API
  does, and a service polls it with ``ChainClient(..., published=True)``.
- **What**: the chain's document exactly as the read path serves it (``encode_document``),
  signed when it is published by the key that signs then, read from the database (not a
  process's cache: a key activated a moment ago by another process signs it).
- **When**: a change's commit queues ``worker.publishing.publish_chain`` for its chain
  (``publish_after_commit``: every new version and every raised epoch is announced by
  ``events.selection_changed``), and a key's activation queues it for every chain. The task
  reads the chain's document when it runs: a late or retried task publishes what is current
  then, never the version that queued it. The beat publishes every chain every
  ``PUBLISH_EVERY_SECONDS`` too, and ``manage.py publish`` does it at once.
- **Order**: a target never goes back. Each publish reads what the target holds and writes only
  a document that ``replaces`` it: a later (epoch, version), or the same one signed later by
  another key (signed anew after a key's activation). The same version signed again by the same
  key is not written, so any number of tasks, retries and sweeps leaves one write per version.
  Two publishers at once: the directory's read, compare and write run under a lock per chain
  that every process on the host shares (``document_files.keep``, which a relay's cache uses
  too), and S3's write is conditional (``If-Match`` the ETag read, ``If-None-Match: *`` when
  there was none), so it fails if another publisher wrote in between; the publisher then reads
  again and decides again.
- **Evidence**: what a target holds counts only if it is the control plane's (``Evidence``, one
  rule for both targets): its signature verifies with the control plane's trusted keys (when it
  has any; without keys documents go out unsigned and only the order applies), and its (epoch,
  version) is not beyond the chain's own record in the database. Anything else was written by
  someone else: it is replaced by the chain's current document whatever it claims, and reported
  (``Replaced``: an ERROR log line, ``events.publish_replaced``, from which audit raises the
  ``publish_forged`` alert that ``/metrics`` counts as ``controlplane_publish_replaced_total``;
  ``manage.py publish`` exits 1 naming it).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from celery import current_app
from django.conf import settings
from django.db import transaction

from presets import document_files, environments, events, services, signing
from presets.document_files import MAX_DOCUMENT_BYTES, NotADocument, Publication
from presets.document_signatures import (
    BAD_SIGNATURE,
    MALFORMED,
    NOT_A_DOCUMENT,
    UNSIGNED,
    UNTRUSTED_KEY,
    PublicKeys,
    Refusal,
)
from presets.documents import encode_document
from presets.models import Chain, Selection, current_epoch
from presets.signing import signer_now

log = logging.getLogger(__name__)

# The read API's path: the same URL path serves a document from the API and from a target.
CHAINS_PATH = "api/v1/chains"
CONTENT_TYPE = "application/json"
# A cache between a target and the services (a CDN) revalidates every poll (If-None-Match), so
# a change reaches services at their next poll, not when a cached copy ages out.
CACHE_CONTROL = "no-cache"
PUBLISH_TASK = "worker.publishing.publish_chain"
BACKOFF_CAP_SECONDS = 300
# Another publisher wrote between a read and the conditional write: read and decide again, at
# most this many times before the attempt counts as failed (and is retried with backoff).
CONFLICT_ROUNDS = 5
# Queuing a publish retries the broker briefly, then gives up: the beat's publish makes it good.
QUEUE_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


# Why a document a target held did not count (``Replaced.reason``, the metric's label): one of
# ``document_signatures.KINDS`` (it does not verify), or this: it claims an (epoch, version)
# beyond the control plane's own record of the chain, which the control plane never made.
BEYOND_RECORD = "beyond_record"


def _order_words(order: tuple[int, int]) -> str:
    epoch, version = order
    return f"v{version} (epoch {epoch})" if epoch else f"v{version}"


@dataclass(frozen=True)
class Replaced:
    """A document a target held that did not count (``Evidence.doubt``), replaced by the
    chain's current one: what was found, why it did not count, and what replaced it."""

    target: str
    reason: str  # a refusal kind (document_signatures.KINDS) or BEYOND_RECORD
    found: str  # what the target held, in words ("v99999", "an object that is no chain document")
    why: str  # why it did not count, in words
    held: Publication | None  # None: no chain document at all
    record: tuple[int, int]  # the control plane's (epoch, version) of the chain when judged
    publication: Publication  # what replaced it

    def __str__(self) -> str:
        replaced_with = _order_words(self.publication.order)
        return f"{self.publication.name}: {self.target} held {self.found}{self.why}; replaced with {replaced_with}"

    def to_details(self) -> dict[str, Any]:
        """The facts, as an alert keeps them."""
        held = self.held
        return {
            "target": self.target,
            "reason": self.reason,
            "found": None
            if held is None
            else {"epoch": held.epoch, "version": held.version, "key_id": held.key_id, "signed_at": held.signed_at},
            "record": {"epoch": self.record[0], "version": self.record[1]},
            "replaced_with": {
                "epoch": self.publication.epoch,
                "version": self.publication.version,
                "key_id": self.publication.key_id,
            },
        }


@dataclass(frozen=True)
class Evidence:
    """What a document a target holds must show to count (DESIGN §15, "Evidence"): a signature
    that verifies with one of the control plane's trusted keys, when it has any (``keys``), and
    an (epoch, version) the control plane made: not beyond its record of the chain. The one rule
    of both targets; a document that fails it is replaced whatever it claims."""

    keys: PublicKeys | None  # None: the control plane has no key, documents go out unsigned

    @classmethod
    def now(cls) -> Evidence:
        """The rule with the keys the control plane trusts now (``signing.trusted_keys``)."""
        trusted = signing.trusted_keys()
        if not trusted:
            return cls(None)
        return cls(PublicKeys({key.key_id: signing.decode(key.public_key) for key in trusted}))

    def doubt(self, body: bytes, *, publication: Publication, target: str) -> Replaced | None:
        """Why what ``target`` holds (``body``, its exact bytes) does not count against
        ``publication`` (the chain's current document), or None when it counts."""
        try:
            held: Publication | None = Publication.of(body)
        except NotADocument:
            held = None
        refusal = None if self.keys is None else self.keys.refusal_of_body(body)
        if held is None:
            if refusal is None:
                return None  # nothing to believe: replaced as any non-document is
            thing = "an object" if target.startswith("s3://") else "a file"
            return Replaced(
                target=target,
                reason=NOT_A_DOCUMENT,
                found=f"{thing} that is no chain document",
                why=f" ({refusal.why})",
                held=None,
                record=publication.order,
                publication=publication,
            )
        if (held.name, held.environment) != (publication.name, publication.environment):
            return Replaced(
                target=target,
                reason=NOT_A_DOCUMENT,
                found=f"chain {_label(held)}'s {_order_words(held.order)}",
                why=f" at the path of chain {_label(publication)}",
                held=held,
                record=publication.order,
                publication=publication,
            )
        if refusal is not None and refusal.kind == UNSIGNED and _says_the_same(held, publication):
            refusal = None  # published before the control plane had a key: the same words, unsigned
        beyond: tuple[int, int] | None = None
        if held.order > publication.order:
            # Read again now: another publisher may have published a change made since
            # ``publication`` was read; only beyond what the database holds now is never made.
            record = record_of(_label(publication))
            if record is not None and held.order > record:
                beyond = record
        if refusal is None and beyond is None:
            return None
        why = "" if refusal is None else f" ({_refusal_words(refusal, held)})"
        if beyond is not None:
            why += f", which the control plane never made (it is at {_order_words(beyond)})"
            if refusal is None and self.keys is not None:
                why += (
                    ", yet signed by a trusted key: the database was restored without `manage.py raise_epoch`, "
                    "or a signing key is in other hands"
                )
        return Replaced(
            target=target,
            reason=BEYOND_RECORD if refusal is None else refusal.kind,
            found=_order_words(held.order),
            why=why,
            held=held,
            record=beyond or publication.order,
            publication=publication,
        )


def _refusal_words(refusal: Refusal, held: Publication) -> str:
    if refusal.kind == UNSIGNED:
        return "unsigned, while the control plane signs every document"
    if refusal.kind == UNTRUSTED_KEY:
        return f"signed by key {held.key_id!r}, none of the control plane's trusted keys"
    if refusal.kind == BAD_SIGNATURE:
        return f"its signature does not verify with key {held.key_id!r}: changed after it was signed"
    assert refusal.kind == MALFORMED
    return refusal.why


def _says_the_same(held: Publication, publication: Publication) -> bool:
    """Whether ``held`` is ``publication`` but for its signature."""
    if held.order != publication.order:
        return False
    unsigned, current = json.loads(held.body), json.loads(publication.body)
    unsigned.pop("signature", None)
    current.pop("signature", None)
    return bool(unsigned == current)


def record_of(chain: str) -> tuple[int, int] | None:
    """The control plane's own record of ``chain`` (a label: ``environments.label``): the
    (epoch, version) it serves now, read from the database (None: no such chain)."""
    environment, name = environments.from_label(chain)
    found = Selection.objects.filter(chain__name=name, chain__environment=environment)
    version = found.values_list("version", flat=True).first()
    return None if version is None else (current_epoch(), version)


def _label(publication: Publication) -> str:
    """The chain a publication is of, by its label (a document that names no environment: the default's)."""
    return environments.label(publication.environment or environments.default(), publication.name)


def chains_path(environment: str) -> str:
    """Where ``environment``'s documents go under a target: the read API's path, which for
    another environment than the default starts with ``env/<env>/`` as the API's URLs do."""
    if not environment or environment == environments.default():
        return CHAINS_PATH
    return f"env/{environment}/{CHAINS_PATH}"


@dataclass(frozen=True)
class Outcome:
    """What one target did with one document: wrote it, or kept what it holds; ``replaced``
    when what it held did not count (someone else wrote it)."""

    target: str
    publication: Publication
    held: Publication | None
    written: bool
    replaced: Replaced | None = None

    def __str__(self) -> str:
        if self.written:
            return f"{self.publication}: published to {self.target}"
        held = self.held
        assert held is not None  # only a held document keeps a target from being written
        if held.order == self.publication.order:
            signed = f"signed by {held.key_id} at {held.signed_at}" if held.key_id else "unsigned"
            return f"{self.publication}: {self.target} already holds it ({signed})"
        return f"{self.publication}: {self.target} holds the newer {held}; left as it is"


class TargetUnavailable(Exception):
    """A target could not be read or written (unreachable, refused, missing); one line, no
    secret (no credentials, no URL query)."""


class PublishFailed(Exception):
    """A document was not published to every target: ``failures`` names each target that
    failed and why; ``outcomes`` holds what the others did."""

    def __init__(self, publication: Publication, *, failures: list[tuple[str, str]], outcomes: list[Outcome]) -> None:
        self.publication = publication
        self.failures = failures
        self.outcomes = outcomes
        super().__init__(str(self))

    def __str__(self) -> str:
        failed = "; ".join(f"{target}: {why}" for target, why in self.failures)
        return f"{self.publication}: not published to {failed}"


class Target(Protocol):
    """Where documents are published."""

    @property
    def name(self) -> str: ...

    def publish(self, publication: Publication, *, evidence: Evidence | None = None) -> Outcome:
        """Write ``publication`` unless what the target holds counts (``evidence``, the rule
        with the trusted keys now by default) and is as new (``replaces``); raises
        TargetUnavailable."""
        ...

    def held(self, chain: str) -> Publication | None:
        """The document the target holds for ``chain`` (None: none, or not a document)."""
        ...


# --- a directory a web server serves --------------------------------------------------------------


@dataclass(frozen=True)
class DirectoryTarget:
    """Documents as files under ``root``: written whole (a temporary file in the same directory,
    then renamed over the old one), readable by the web server (0644), and compared with the
    file they replace under the chain's lock (``.<name>.lock`` beside them)."""

    root: Path

    @property
    def name(self) -> str:
        return f"directory {self.root}"

    def path(self, chain: str) -> Path:
        """The file of ``chain`` (a label: ``environments.label``)."""
        environment, name = environments.from_label(chain)
        return self.root / chains_path(environment) / name

    def publish(self, publication: Publication, *, evidence: Evidence | None = None) -> Outcome:
        if not self.root.is_dir():
            raise TargetUnavailable(
                f"{self.root} is not a directory: create it (the directory the web server serves) or fix "
                "PUBLISH_DIRECTORY"
            )
        rule = evidence or Evidence.now()
        doubts: list[Replaced] = []

        def counts(body: bytes) -> bool:  # judged under the chain's lock, with the file's bytes
            doubt = rule.doubt(body, publication=publication, target=self.name)
            if doubt is None:
                return True
            doubts.append(doubt)
            return False

        try:
            directory = self.root / chains_path(publication.environment)
            directory.mkdir(parents=True, exist_ok=True)
            written, held = document_files.keep(directory, publication, counts=counts)
        except OSError as exc:
            raise TargetUnavailable(f"{exc.filename or self.root}: {exc.strerror or exc}") from exc
        return Outcome(self.name, publication, held, written=written, replaced=doubts[-1] if doubts else None)

    def held(self, chain: str) -> Publication | None:
        return document_files.read_held(self.path(chain))


# --- S3-compatible object storage ------------------------------------------------------------------


# S3's answers to a conditional write that lost: another publisher wrote (412), is writing
# (409), or removed the object (404) since it was read.
_CONFLICTS = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409"}


@dataclass(frozen=True)
class S3Target:
    """Documents as objects in ``bucket`` under ``prefix``, each written only on the condition
    that the object is still the one read (its ETag), or still absent."""

    bucket: str
    prefix: str = ""
    endpoint_url: str = ""
    region: str = ""
    timeout: float = 10.0

    @property
    def name(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def key(self, chain: str) -> str:
        """The object of ``chain`` (a label: ``environments.label``)."""
        environment, name = environments.from_label(chain)
        return "/".join(part for part in (self.prefix, chains_path(environment), name) if part)

    def publish(self, publication: Publication, *, evidence: Evidence | None = None) -> Outcome:
        from botocore.exceptions import BotoCoreError, ClientError

        rule = evidence or Evidence.now()
        key = self.key(_label(publication))
        client = _s3_client(self.endpoint_url, self.region, self.timeout)
        for _ in range(CONFLICT_ROUNDS):
            held, etag, body = self._read(key)
            doubt = None if body is None else rule.doubt(body, publication=publication, target=self.name)
            if doubt is None and not publication.replaces(held):
                return Outcome(self.name, publication, held, written=False)
            condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
            try:
                client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=publication.body,
                    ContentType=CONTENT_TYPE,
                    CacheControl=CACHE_CONTROL,
                    **condition,
                )
            except ClientError as exc:
                if _error_code(exc) in _CONFLICTS:
                    log.info("publishing: %s changed while %s was written to it; reading it again", key, publication)
                    continue
                raise TargetUnavailable(_client_error(exc, self.bucket)) from None
            except BotoCoreError as exc:
                raise TargetUnavailable(_one_line(exc)) from None
            return Outcome(self.name, publication, held, written=True, replaced=doubt)
        raise TargetUnavailable(f"{key} changed under each of {CONFLICT_ROUNDS} writes; trying again later")

    def held(self, chain: str) -> Publication | None:
        return self._read(self.key(chain))[0]

    def _read(self, key: str) -> tuple[Publication | None, str | None, bytes | None]:
        """What the object holds, its ETag and its bytes; (None, None, None) when there is none."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = _s3_client(self.endpoint_url, self.region, self.timeout)
        try:
            answer = client.get_object(Bucket=self.bucket, Key=key)
            body = answer["Body"].read(MAX_DOCUMENT_BYTES + 1)
        except ClientError as exc:
            if _error_code(exc) in ("NoSuchKey", "404"):
                return None, None, None
            raise TargetUnavailable(_client_error(exc, self.bucket)) from None
        except BotoCoreError as exc:
            raise TargetUnavailable(_one_line(exc)) from None
        return document_files.held_in(body, where=f"s3://{self.bucket}/{key}"), answer["ETag"], body


@cache
def _s3_client(endpoint_url: str, region: str, timeout: float) -> Any:
    """One client per process and settings (boto3's clients are thread-safe); boto3 is imported
    only where a bucket is published to."""
    import boto3
    from botocore.config import Config

    options: dict[str, Any] = {
        "connect_timeout": timeout,
        "read_timeout": timeout,
        # One try per attempt: the task retries with backoff. (A conditional write whose answer
        # was lost is settled by the next read: the object then holds this very document.)
        "retries": {"mode": "standard", "total_max_attempts": 1},
    }
    if endpoint_url:
        # S3-compatible servers (MinIO, Ceph, moto...) take path-style addresses and may not
        # know the checksums boto3 adds to AWS requests by default.
        options |= {
            "s3": {"addressing_style": "path"},
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url or None, region_name=region or None, config=Config(**options)
    )


def _error_code(exc: Any) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _client_error(exc: Any, bucket: str) -> str:
    code = _error_code(exc)
    if code == "NoSuchBucket":
        return f"bucket {bucket!r} does not exist: create it, or fix PUBLISH_S3_BUCKET"
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        return f"{code}: the credentials may not write to bucket {bucket!r} (check AWS_* and the bucket's policy)"
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return f"{code} (HTTP {status})" if status else code


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or exc.__class__.__name__


# --- the service -------------------------------------------------------------------------------------


def enabled() -> bool:
    """Whether any target is set (PUBLISH_DIRECTORY, PUBLISH_S3_BUCKET)."""
    return bool(settings.PUBLISH_DIRECTORY or settings.PUBLISH_S3_BUCKET)


def targets() -> list[Target]:
    """The targets the settings name, read at call time."""
    found: list[Target] = []
    if settings.PUBLISH_DIRECTORY:
        found.append(DirectoryTarget(Path(settings.PUBLISH_DIRECTORY)))
    if settings.PUBLISH_S3_BUCKET:
        found.append(
            S3Target(
                bucket=settings.PUBLISH_S3_BUCKET,
                prefix=settings.PUBLISH_S3_PREFIX,
                endpoint_url=settings.PUBLISH_S3_ENDPOINT_URL,
                region=settings.PUBLISH_S3_REGION,
                timeout=float(settings.PUBLISH_TIMEOUT_SECONDS),
            )
        )
    return found


def current_publication(chain: str) -> Publication:
    """The document of ``chain`` (a label: ``environments.label``) now, read from the database
    (an expired pin reverted first, as every read does) and signed now by the key that signs;
    raises NotFound for an unknown chain."""
    environment, name = environments.from_label(chain)
    selection = services.revert_expired_and_read(chain=name, environment=environment)
    # The epoch after the selection: a raise committed in between makes the document newer,
    # never older, than the one the raise announced.
    document = selection.to_document(epoch=current_epoch())
    signer = signer_now()
    return Publication.of(encode_document(document if signer is None else signer.sign(document)))


def publish_document(publication: Publication, *, to: Sequence[Target] | None = None) -> list[Outcome]:
    """Offer ``publication`` to every target (the settings' unless ``to``); each writes it only if
    it is newer than what it holds, or what it holds does not count (``Evidence``): that is
    reported (``report_replaced``). Raises PublishFailed after trying them all if any failed."""
    evidence = Evidence.now()
    outcomes: list[Outcome] = []
    failures: list[tuple[str, str]] = []
    chosen = targets() if to is None else to
    if not chosen:
        log.warning(
            "publishing: %s was to be published, but this process has neither PUBLISH_DIRECTORY nor "
            "PUBLISH_S3_BUCKET: set them on the worker as where the change was made",
            publication,
        )
    for target in chosen:
        try:
            outcome = target.publish(publication, evidence=evidence)
        except TargetUnavailable as exc:
            log.warning("publishing: %s not published to %s: %s", publication, target.name, exc)
            failures.append((target.name, str(exc)))
            continue
        outcomes.append(outcome)
        log.log(logging.INFO if outcome.written else logging.DEBUG, "publishing: %s", outcome)
        if outcome.replaced is not None:
            report_replaced(outcome.replaced)
    if failures:
        raise PublishFailed(publication, failures=failures, outcomes=outcomes)
    return outcomes


def report_replaced(replaced: Replaced) -> None:
    """Say that a target held a document that was not the control plane's, now replaced: an
    ERROR line, and ``events.publish_replaced`` (audit raises the ``publish_forged`` alert,
    which ``/metrics`` counts). A receiver that fails is logged; the publish stands."""
    log.error("publishing: %s", replaced)
    for receiver, result in events.publish_replaced.send_robust(sender=Publication, replaced=replaced):
        if isinstance(result, Exception):
            log.error(
                "publishing: %s could not be reported by %s (%s: %s)",
                replaced,
                getattr(receiver, "__qualname__", receiver),
                result.__class__.__name__,
                result,
            )


def publish_chain(*, chain: str, to: Sequence[Target] | None = None) -> list[Outcome]:
    """Publish the chain's current document (``current_publication``); raises NotFound or
    PublishFailed."""
    return publish_document(current_publication(chain), to=to)


@dataclass(frozen=True)
class Report:
    """What publishing several chains did: every target's outcome, and each chain that failed."""

    outcomes: list[Outcome]
    failed: list[PublishFailed]

    @property
    def written(self) -> int:
        return sum(outcome.written for outcome in self.outcomes)

    @property
    def replaced(self) -> list[Replaced]:
        """What targets held that was not the control plane's, each replaced."""
        return [outcome.replaced for outcome in self.outcomes if outcome.replaced is not None]


def publish_chains(*, chains: Iterable[str] | None = None, to: Sequence[Target] | None = None) -> Report:
    """Publish each chain (every chain unless ``chains``) to every target; a chain that fails
    does not stop the others. Raises NotFound for an unknown chain named in ``chains``."""
    names = _every_chain() if chains is None else list(chains)
    outcomes: list[Outcome] = []
    failed: list[PublishFailed] = []
    for name in names:
        try:
            outcomes += publish_chain(chain=name, to=to)
        except PublishFailed as exc:
            outcomes += exc.outcomes
            failed.append(exc)
    return Report(outcomes, failed)


def retry_in(failed: PublishFailed, *, attempts: int) -> float | None:
    """Seconds to wait before attempt ``attempts + 1`` after ``attempts`` failed (exponential
    from PUBLISH_BACKOFF_SECONDS, with jitter, at most 5 minutes), or None once
    PUBLISH_MAX_ATTEMPTS were made; the log says which."""
    if attempts >= settings.PUBLISH_MAX_ATTEMPTS:
        log.error(
            "publishing: giving up on %s after %d attempts (%s); the next change, the beat's publish "
            "(PUBLISH_EVERY_SECONDS) or manage.py publish publishes it",
            failed.publication,
            attempts,
            failed,
        )
        return None
    backoff = settings.PUBLISH_BACKOFF_SECONDS * 2 ** (attempts - 1)
    delay = min(BACKOFF_CAP_SECONDS, backoff * random.uniform(0.75, 1.25))
    log.info("publishing: attempt %d for %s failed; the next in %.1f s", attempts, failed.publication, delay)
    return delay


# --- queued when a change commits ----------------------------------------------------------------


def publish_after_commit(sender: Any, *, selection: Any, **_: Any) -> None:
    """Queue the publication of the chain's document for when the change commits (a receiver of
    ``events.selection_changed``: every new version, every raised epoch)."""
    if enabled():
        _after_commit([selection.chain.label])


def publish_all_after_commit(sender: Any, **_: Any) -> None:
    """Queue every chain's publication for when the key's activation commits (a receiver of
    ``events.signing_key_activated``): their documents are signed anew by it."""
    if enabled():
        _after_commit(_every_chain())


def _every_chain() -> list[str]:
    """Every chain of every environment, by label."""
    rows = Chain.objects.order_by("name", "environment").values_list("environment", "name")
    return [environments.label(environment, name) for environment, name in rows]


def _after_commit(chains: list[str]) -> None:
    transaction.on_commit(lambda: queue(chains), robust=True)


def queue(chains: Iterable[str]) -> None:
    """Hand each chain's publication to the worker. A broker that does not take it fails
    nothing: one warning, and the beat's publish makes it good."""
    task = current_app.tasks[PUBLISH_TASK]
    for chain in chains:
        try:
            task.apply_async((chain,), retry=True, retry_policy=QUEUE_RETRY_POLICY)
        except Exception as exc:  # whatever the broker raises, the change is made
            log.warning(
                "publishing: could not queue %s (%s: %s); the beat's publish (PUBLISH_EVERY_SECONDS) or "
                "manage.py publish publishes it",
                chain,
                exc.__class__.__name__,
                exc,
            )
