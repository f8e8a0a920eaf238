"""Chains, their reviewed presets, the live selection of each chain, and service tokens.

Selections change only through ``presets.services``; every change is a new version and one
historical row (django-simple-history) that alone answers who, when, what, from what, and why.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

import simple_history.manager
from django.conf import settings
from django.db import connection, models
from django.utils import timezone
from simple_history.models import HistoricalRecords

from presets import environments
from presets.documents import NO_MARKING, ChainDocument, DefaultChainDocument, DrillDocument, format_instant
from presets.expiry import has_passed


def expiry_passed(now: datetime) -> models.Q:
    """The rows whose ``expires_at`` has passed at ``now`` (``presets.expiry``'s rule)."""
    return models.Q(expires_at__lte=now)


def expiry_not_passed(now: datetime) -> models.Q:
    """The rows without an expiry, or with one still ahead of ``now``."""
    return models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)


class Epoch(models.Model):
    """The control plane's epoch: one row, raised after a database restore.

    Clients order documents by (epoch, version). Restoring a backup takes versions back;
    raising the epoch makes the restored documents newer than anything a client saved."""

    value = models.PositiveBigIntegerField(default=0)
    raised_at = models.DateTimeField(null=True, blank=True)
    raised_by = models.CharField(max_length=150, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    def __str__(self) -> str:
        return f"epoch {self.value}"


class HistoryManager(simple_history.manager.HistoryManager):
    """django-simple-history's manager, its class made once: each ``Model.history`` builds
    ``from_queryset``'s class again (``inspect.getmembers`` of the queryset class, ~140 us),
    on every read of the history and every change's historical row."""

    @classmethod
    @functools.cache
    def from_queryset(cls, queryset_class: type[Any], class_name: str | None = None) -> Any:
        return super().from_queryset(queryset_class, class_name)


def current_epoch() -> int:
    """The epoch documents carry now (0 until one is raised)."""
    value = Epoch.objects.values_list("value", flat=True).first()
    return value or 0


# The epoch's one row (migration 0007 makes it; ``raise_epoch`` raises it).
EPOCH_ROW = 1


def epoch_held() -> str:
    """The statement reading the epoch *held* until the change commits, to make part of a
    change's statement (``services._lock``) or run alone (``read_epoch_held``): on PostgreSQL
    the row is read ``FOR KEY SHARE``, which ``raise_epoch``'s ``FOR UPDATE`` waits for (and
    which waits for a raise in flight). So a change is announced with the epoch it commits
    under: read unheld, a raise committing between the read and the change's commit would
    announce the chain's old version with the new epoch, and the change after it with the old
    one, which every reader takes for older and ignores. Changes hold it together (a share
    lock). SQLite runs one writer at a time: nothing to hold."""
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    return f"SELECT value FROM {connection.ops.quote_name(Epoch._meta.db_table)} WHERE id = {EPOCH_ROW:d}{lock}"


def read_epoch_held() -> int:
    """``epoch_held`` on its own: the epoch (0 until one is raised), held until the
    transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute(epoch_held())
        row = cursor.fetchone()
    return row[0] if row is not None else 0


PRESET_NAME_MAX = 50
ENVIRONMENT_MAX = environments.NAME_MAX


def default_environment() -> str:
    """A new chain's or token's environment unless one is given: the default one."""
    return environments.default()


class Chain(models.Model):
    """A routing slot (e.g. ``chat``) with reviewed presets, one default and one selection."""

    name = models.SlugField()
    # Which environment's chain this is (presets/environments.py): each has its own selection,
    # history, plans, guards, drills, alerts and fleet. Existing chains are the default's.
    environment = models.SlugField(max_length=ENVIRONMENT_MAX, default=default_environment)
    description = models.TextField(blank=True)
    default_preset = models.ForeignKey("Preset", null=True, on_delete=models.PROTECT, related_name="+")
    contract = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    history = HistoricalRecords(history_manager=HistoryManager)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["environment", "name"], name="chain_unique_per_environment")]

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """Its name where every environment's chains are listed together (``environments.label``)."""
        return environments.label(self.environment, self.name)

    @property
    def default(self) -> Preset:
        """The default preset: what the chain serves when nothing is pinned (every synced
        chain has one; the column is nullable only because chains are created first)."""
        if self.default_preset is None:
            raise LookupError(f"chain {self.name} has no default preset: run manage.py sync_presets")
        return self.default_preset


class Preset(models.Model):
    """A named, reviewed list of 1..4 distinct steps for one chain. Never deleted: retired."""

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="presets")
    name = models.SlugField(max_length=PRESET_NAME_MAX)
    steps = models.JSONField()
    marking = models.JSONField(default=dict, blank=True)
    # What the SDK's routers do on a failure for this preset (``presets_file.normal_policy``),
    # reviewed in the presets file; None: none, the routers' defaults.
    failure_policy = models.JSONField(null=True, blank=True, default=None)
    description = models.TextField(blank=True)
    source_hash = models.CharField(max_length=64)
    retired_at = models.DateTimeField(null=True, blank=True)
    history = HistoricalRecords(history_manager=HistoryManager)

    class Meta:
        ordering = ["chain__name", "name"]
        constraints = [models.UniqueConstraint(fields=["chain", "name"], name="preset_unique_per_chain")]

    def __str__(self) -> str:
        return f"{self.chain.name}/{self.name}"

    @property
    def is_retired(self) -> bool:
        """Whether the preset was removed from the reviewed file."""
        return self.retired_at is not None

    @property
    def is_default(self) -> bool:
        """Whether this preset is its chain's default."""
        return self.chain.default_preset_id == self.pk

    @property
    def is_degraded(self) -> bool:
        """Whether the reviewed file marks this preset degraded (``is_degraded``)."""
        return is_degraded(self.marking)


def is_degraded(marking: Mapping[str, Any] | None) -> bool:
    """Whether a marking (a preset's, or the one a selection serves) says degraded."""
    return bool((marking or {}).get("degraded"))


class Action(models.TextChoices):
    SELECT = "select"
    REVERT = "revert"
    EXTEND = "extend"
    RESTORE = "restore"
    EXPIRE = "expire"
    SYNC = "sync"
    DRILL = "drill"  # a failover drill started or ended: same preset, steps and expiry


class Selection(models.Model):
    """Which preset a chain serves now, with the value it replaced (one row per chain)."""

    chain = models.OneToOneField(Chain, on_delete=models.PROTECT, related_name="selection")
    version = models.PositiveIntegerField()
    preset = models.ForeignKey(Preset, on_delete=models.PROTECT, related_name="+")
    steps = models.JSONField()
    marking = models.JSONField(default=dict)
    # The served preset's failure policy, as this version serves it (with its steps and
    # marking: a later change of the preset is a later version).
    failure_policy = models.JSONField(null=True, blank=True, default=None)
    spend_bound_per_hour = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="a pin's spend bound (the registry's currency an hour): a spend alert when the chain's spend "
        "passes it while the pin is live; it lasts as long as the pin",
    )
    updated_by = models.CharField(max_length=150)
    reason = models.CharField(max_length=500)
    updated_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    action = models.CharField(max_length=10, choices=Action.choices)
    previous_version = models.PositiveIntegerField(null=True, blank=True)
    previous_preset = models.ForeignKey(Preset, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    previous_steps = models.JSONField(null=True, blank=True)
    previous_expires_at = models.DateTimeField(null=True, blank=True)
    # The failover drill the chain's document carries (``presets.drills``), while it runs.
    drill = models.ForeignKey(
        "Drill", null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    history = HistoricalRecords(history_manager=HistoryManager)
    # The epoch a change of this selection was made under (``epoch_held``, read by
    # ``services._lock`` or ``_apply``): its document carries that one, not a later read.
    change_epoch: int | None = None
    # The presets a change read with its lock (``services._lock``), by name: the live one and
    # the one it was asked to make live.
    presets_read: dict[str, Preset] = {}  # noqa: RUF012 - set per instance, never mutated

    class Meta:
        ordering = ["chain__name"]

    def __str__(self) -> str:
        return f"{self.chain.name} v{self.version}: {self.preset.name}"

    @property
    def is_pinned(self) -> bool:
        """Whether a non-default preset is live (a pin always has an expiry)."""
        return self.expires_at is not None

    def is_expired(self, now: datetime) -> bool:
        """Whether this pin's time is up and it must not be served any more."""
        return has_passed(self.expires_at, now)

    @property
    def is_default(self) -> bool:
        """Whether the chain serves its default preset. The services keep a pin (a non-default
        preset) always with an expiry and the default never, so this is ``not is_pinned``."""
        return not self.is_pinned

    @property
    def expires_at_ts(self) -> float | None:
        """The pin's expiry in Unix seconds (None for the default), as the read path keeps it."""
        return self.expires_at.timestamp() if self.expires_at is not None else None

    def to_document(self, *, epoch: int | None = None) -> ChainDocument:
        """The chain document of DESIGN §7 and §13, the SDK's input.

        It carries the chain's default (what a pin falls back to at its expiry), so a
        client switches to it by itself at ``expires_at`` even when this server is out of
        reach. ``epoch`` is read from the database unless the caller already has it, or the
        change that made this version read it (``change_epoch``)."""
        default = self.chain.default_preset
        if epoch is None:
            epoch = current_epoch() if self.change_epoch is None else self.change_epoch
        document: ChainDocument = {
            "name": self.chain.name,
            "environment": self.chain.environment,
            "epoch": epoch,
            "version": self.version,
            "preset": self.preset.name,
            "is_default": self.is_default,
            "chain": self.steps,
            "marking": self.marking or NO_MARKING.copy(),
            "updated_by": self.updated_by,
            "reason": self.reason,
            "updated_at": format_instant(self.updated_at),
            "expires_at": format_instant(self.expires_at),
            "default": _default_document(default) if default is not None else None,
        }
        if self.failure_policy is not None:
            document["failure_policy"] = self.failure_policy
        if self.drill_id is not None and self.drill is not None:
            document["drill"] = self.drill.to_document()
        return document


def _default_document(default: Preset) -> DefaultChainDocument:
    """What a pin falls back to at its expiry: the default preset's steps, marking and (only
    when it has one: a document without is what it was before policies) failure policy."""
    marking = default.marking or NO_MARKING.copy()
    document = DefaultChainDocument(preset=default.name, chain=default.steps, marking=marking)
    if default.failure_policy is not None:
        document["failure_policy"] = default.failure_policy
    return document


def lock_selection(selection_id: int) -> Selection:
    """Lock one selection row, then load what it refers to (inside a transaction): the
    sweeps lock a selection with this; the services' changes lock theirs by chain name in
    ``services._lock``, on the same rule, after the chain's row (their queue).

    The lock query joins nothing: under READ COMMITTED, PostgreSQL re-checks a row that
    changed while we waited for its lock against the *old* rows of any joined table, so a
    join on ``preset`` (which the winner just changed) would make the row vanish."""
    selection = Selection.objects.select_for_update().get(pk=selection_id)
    selection.chain = Chain.objects.select_related("default_preset").get(pk=selection.chain_id)
    return selection


class PlanState(models.TextChoices):
    PLANNED = "planned"  # waiting for its start
    SUSPENDED = "suspended"  # its start found a conflict: a person starts it anyway or cancels it
    STARTED = "started"  # its pin is live
    ENDED = "ended"  # its pin was live and no longer is
    CANCELLED = "cancelled"
    MISSED = "missed"  # its end came before it could start


# The states in which a plan holds its time on the chain: another plan may not overlap it.
HOLDING_PLAN_STATES = (PlanState.PLANNED, PlanState.SUSPENDED, PlanState.STARTED)


class PlannedPin(models.Model):
    """A pin planned ahead (``presets.plans``): a reviewed preset for a chain from ``starts_at``
    to ``ends_at``. The beat starts it as a pin expiring at ``ends_at`` unless the chain changed
    since it was planned (``based_on_version``) or its preset was retired or marked degraded."""

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="plans")
    preset = models.ForeignKey(Preset, on_delete=models.PROTECT, related_name="+")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=500)
    planned_by = models.CharField(max_length=150)
    planned_at = models.DateTimeField()
    # The chain's version when the plan was made or last changed: a change by a person after
    # it suspends the plan's start.
    based_on_version = models.PositiveIntegerField()
    # Whether the preset was marked degraded when planned: marked since, the start is suspended.
    planned_degraded = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=PlanState.choices, default=PlanState.PLANNED)
    # Why it is suspended, or how it ended, was cancelled or missed.
    state_reason = models.CharField(max_length=600, blank=True)
    # The version its start made (started and ended plans).
    started_version = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["starts_at", "id"]
        indexes = [models.Index(fields=["state", "starts_at"], name="plan_state_start")]

    def __str__(self) -> str:
        return f"plan #{self.pk} {self.chain.name}: {self.preset.name}"

    @property
    def is_holding(self) -> bool:
        return self.state in HOLDING_PLAN_STATES


class PlanEventKind(models.TextChoices):
    PLANNED = "planned"
    CHANGED = "changed"
    SUSPENDED = "suspended"
    STARTED = "started"
    ENDED = "ended"
    CANCELLED = "cancelled"
    MISSED = "missed"


class PlanEvent(models.Model):
    """One step of a plan's life, append-only: who did what to it, when and why."""

    plan = models.ForeignKey(PlannedPin, on_delete=models.PROTECT, related_name="events")
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=10, choices=PlanEventKind.choices)
    actor = models.CharField(max_length=150)
    reason = models.CharField(max_length=600)
    at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["chain", "at"], name="plan_event_chain_at")]


class DrillState(models.TextChoices):
    PLANNED = "planned"  # waiting for its start
    RUNNING = "running"  # in the chain's document: clients inject its faults
    ENDED = "ended"  # its window is over, or it was aborted: no longer in the document


class Verdict(models.TextChoices):
    PLANNED = "planned"
    RUNNING = "running"  # running, or ended and waiting for the fleet's last reports
    PASSED = "passed"
    FAILED = "failed"
    ABORTED = "aborted"


# Verdicts of a drill that has been judged: what ``last_drill`` and the alerts speak of.
JUDGED_VERDICTS = (Verdict.PASSED, Verdict.FAILED, Verdict.ABORTED)


class Drill(models.Model):
    """A failover drill (``presets.drills``): a share of the chain's live requests fails on
    purpose at one hop, in the SDK and before dispatch, from ``starts_at`` to ``ends_at``;
    the fleet's reports (``audit.drills``) give its verdict."""

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="drills")
    hop = models.PositiveSmallIntegerField()
    fault = models.CharField(max_length=40)
    share_bp = models.PositiveIntegerField()
    # Token names ([]: every service), and their digests as the document carries them.
    services = models.JSONField(default=list, blank=True)
    service_digests = models.JSONField(default=list, blank=True)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=500)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField()
    state = models.CharField(max_length=10, choices=DrillState.choices, default=DrillState.PLANNED)
    verdict = models.CharField(max_length=10, choices=Verdict.choices, default=Verdict.PLANNED)
    # The verdict's reasons, or why it waits, was refused its start or was aborted.
    reasons = models.JSONField(default=list, blank=True)
    # Stop conditions: abort once more drilled requests than this failed for the caller or
    # missed their deadline, or the fallback hop failed more than this share (basis points)
    # of at least ``DRILL_MIN_FALLBACK_ATTEMPTS`` attempts.
    max_failed = models.PositiveIntegerField(default=0)
    max_fallback_error_bp = models.PositiveIntegerField(default=1000)
    # What ran: the preset live and the version whose document first carried the drill.
    preset = models.ForeignKey(Preset, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    steps = models.JSONField(default=list, blank=True)
    started_version = models.PositiveIntegerField(null=True, blank=True)
    ended_version = models.PositiveIntegerField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    # A recurring drill plans its next one this many days after its start.
    repeat_days = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-starts_at", "-id"]
        indexes = [
            models.Index(fields=["state", "starts_at"], name="drill_state_start"),
            models.Index(fields=["chain", "starts_at"], name="drill_chain_start"),
        ]

    def __str__(self) -> str:
        return f"drill {self.pk} on {self.chain.name}: hop {self.hop} {self.fault} {self.share_bp / 100:g}%"

    @property
    def share(self) -> float:
        """The share of requests drilled, in percent."""
        return self.share_bp / 100

    @property
    def minutes(self) -> int:
        return round((self.ends_at - self.starts_at).total_seconds() / 60)

    @property
    def is_judged(self) -> bool:
        return self.verdict in JUDGED_VERDICTS

    def to_document(self) -> DrillDocument:
        """The ``drill`` field of the chain's document while it runs."""
        return {
            "id": self.pk,
            "hop": self.hop,
            "fault": self.fault,
            "share_bp": self.share_bp,
            "services": list(self.service_digests),
            "starts_at": format_instant(self.starts_at),
            "ends_at": format_instant(self.ends_at),
        }


class GuardState(models.TextChoices):
    WATCHING = "watching"  # its bake window runs: the fleet's figures are checked
    OFF = "off"  # a person switched it off
    ACTED = "acted"  # it restored the previous selection (once)
    PASSED = "passed"  # its bake window ended without cause to act
    ENDED = "ended"  # the pin it guarded is no longer live


class PinGuard(models.Model):
    """A guard on one pin (``presets.guards``): during its bake window, if the fleet finds the
    pin's head clearly worse than the head it replaced was before the pin, the selection the
    pin replaced is restored (actor ``system:guard``), once. ``audit.guards`` weighs the
    evidence."""

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="guards")
    pin_version = models.PositiveIntegerField()
    pin_preset = models.ForeignKey(Preset, on_delete=models.PROTECT, related_name="+")
    pinned_at = models.DateTimeField()
    pinned_by = models.CharField(max_length=150)
    bake_until = models.DateTimeField()
    # The selection the pin replaced: what the guard restores.
    previous_version = models.PositiveIntegerField()
    previous_preset = models.ForeignKey(Preset, on_delete=models.PROTECT, related_name="+")
    previous_expires_at = models.DateTimeField(null=True, blank=True)
    new_head = models.JSONField(help_text='the pin\'s first step: {"provider", "model"}')
    old_head = models.JSONField(help_text="the replaced selection's first step")
    state = models.CharField(max_length=10, choices=GuardState.choices, default=GuardState.WATCHING)
    state_reason = models.CharField(max_length=600, blank=True)
    # The previous head's figures over the bake window's span before the pin, read once.
    baseline = models.JSONField(null=True, blank=True)
    # Since when the new head has been worse than the baseline, without a break.
    worse_since = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    acted_version = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-pinned_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["chain", "pin_version"], name="guard_once_per_pin")]
        indexes = [models.Index(fields=["state"], name="guard_state")]

    def __str__(self) -> str:
        return f"guard on {self.chain.name} v{self.pin_version}: {self.state}"

    @property
    def head_text(self) -> str:
        return f"{self.new_head['provider']}/{self.new_head['model']}"

    @property
    def old_head_text(self) -> str:
        return f"{self.old_head['provider']}/{self.old_head['model']}"


class TokenScope(models.TextChoices):
    """What a token may change (``--scope``, kept for compatibility): a token's purpose says more."""

    READ = "read"
    WRITE = "write"


class TokenPurpose(models.TextChoices):
    """What a token is for: ``read`` (a service reading its chains), ``write`` (reads and changes
    selections), ``relay`` (a relay: reads like a read token and may send fleet reports,
    ``POST /api/v1/fleet/seen``)."""

    READ = "read"
    WRITE = "write"
    RELAY = "relay"


TOKEN_PREFIX = "cpt_"


def hash_token(raw: str) -> str:
    """The stored form of a token (tokens are 256-bit random, so a plain SHA-256 suffices)."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ServiceTokenQuerySet(models.QuerySet["ServiceToken"]):
    def active(self, now: datetime | None = None) -> ServiceTokenQuerySet:
        """The tokens that work now: not revoked and not expired."""
        now = timezone.now() if now is None else now
        return self.filter(revoked_at__isnull=True).filter(expiry_not_passed(now))


class ServiceToken(models.Model):
    """A named API credential for a service or script; only its hash is stored."""

    name = models.SlugField(max_length=100, unique=True)
    purpose = models.CharField(max_length=10, choices=TokenPurpose.choices, default=TokenPurpose.READ)
    # Usage reports are evidence: only a token that may send them does (a relay forwards each
    # service's report with the service's own token, so its own sends none).
    reports = models.BooleanField(default=True, help_text="may send usage reports (a relay's token: no)")
    # Marked by an operator: this token's evidence alone may page someone or move a guard (a
    # service that is the only one reading its chain); otherwise EVIDENCE_MIN_TOKENS tokens must agree.
    sole_evidence = models.BooleanField(
        default=False, help_text="its evidence alone may raise a page-level alert or move a guard"
    )
    # What it may read or report for: its environment's chains, all or only those listed.
    environment = models.SlugField(
        max_length=ENVIRONMENT_MAX, default=default_environment, help_text="the environment whose chains it reads"
    )
    chains = models.JSONField(default=list, blank=True, help_text="the only chains it reads (empty: all)")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # None: the token works until it is revoked.
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = ServiceTokenQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.purpose})"

    @property
    def scope(self) -> str:
        """What the token may change, as before purposes: ``write``, else ``read``. Setting it
        (``ServiceToken(scope="write")``) sets the purpose."""
        return TokenScope.WRITE if self.purpose == TokenPurpose.WRITE else TokenScope.READ

    @scope.setter
    def scope(self, value: str) -> None:
        self.purpose = value

    @property
    def actor(self) -> str:
        """How changes made with this token are attributed."""
        return f"token:{self.name}"

    def is_expired(self, now: datetime) -> bool:
        """Whether the token's time is up (a token without an expiry never is)."""
        return has_passed(self.expires_at, now)

    @property
    def can_write(self) -> bool:
        """Whether the token may change selections."""
        return self.purpose == TokenPurpose.WRITE

    @property
    def may_relay(self) -> bool:
        """Whether the token may send a relay's fleet reports (``POST /api/v1/fleet/seen``)."""
        return self.purpose == TokenPurpose.RELAY

    def reads(self, *, environment: str, chain: str | None = None) -> bool:
        """Whether the token may read (or report for) ``chain`` of ``environment`` (None: the
        environment's chain list, which shows a chain-bound token only its chains)."""
        return environments.token_refusal(self.environment, self.chains, environment, chain) is None

    def issue(self) -> str:
        """Set a fresh random secret on this token and return it (shown once, stored hashed)."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.token_hash = hash_token(raw)
        return raw


# Writing last_used_at on every read would put a write on the hot path; a minute's
# precision is what an operator auditing tokens needs.
LAST_USED_PRECISION = timedelta(minutes=1)


# The tokens this process found active lately, by hash, with when (monotonic seconds): the
# changes that reach Django (reads are the read front's) look a token up once a burst. A
# token saved or deleted in this process is forgotten at once (``forget_checked_tokens``,
# connected in PresetsConfig.ready); one revoked by another process stops working here
# within TOKEN_RECHECK_S, as on the read path. Its expiry is checked on every use.
TOKEN_RECHECK_S = 1.0
_CHECKED_MAX = 10_000
_checked: dict[str, tuple[ServiceToken, float]] = {}
_clock = time.monotonic  # tests move it on


def forget_checked_tokens(*_: Any, **__: Any) -> None:
    """Look every token up again (a token was saved or deleted: a signal receiver)."""
    _checked.clear()


def use_token(raw: str) -> ServiceToken | None:
    """The active (not revoked, not expired) token with this secret, *recording its use* (``last_used_at``, at most once
    a minute): a read that writes. Tokens are ASCII; anything else is no token."""
    if not raw.isascii():  # a lone surrogate cannot even be hashed
        return None
    now = timezone.now()
    digest = hash_token(raw)
    checked = _checked.get(digest)
    if checked is not None and _clock() - checked[1] < TOKEN_RECHECK_S:
        token: ServiceToken | None = None if checked[0].is_expired(now) else checked[0]
    else:
        token = ServiceToken.objects.active(now).filter(token_hash=digest).first()
        if token is None:
            _checked.pop(digest, None)
        else:
            if len(_checked) >= _CHECKED_MAX:
                _checked.clear()
            _checked[digest] = (token, _clock())
    if token is not None:
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_PRECISION:
            ServiceToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
    return token


def live_token_hashes(
    *, token_hash: str | None = None
) -> list[tuple[int, str, datetime | None, datetime | None, str, list[str]]]:
    """Every active token (or the one with ``token_hash``) as (pk, hash, expires_at,
    last_used_at, environment, chains): what a process that checks tokens in memory holds
    (the read front's ``TokenSet``)."""
    tokens = ServiceToken.objects.active()
    if token_hash is not None:
        tokens = tokens.filter(token_hash=token_hash)
    fields = ("pk", "token_hash", "expires_at", "last_used_at", "environment", "chains")
    return list(tokens.order_by().values_list(*fields))


def record_token_use(pks: Collection[int], now: datetime) -> int:
    """Record that these tokens were used at ``now`` (``last_used_at``), where their recorded
    use is older than ``LAST_USED_PRECISION``: the batched form of what ``use_token`` does per
    read. Returns how many rows it wrote."""
    stale = models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=now - LAST_USED_PRECISION)
    return ServiceToken.objects.filter(pk__in=list(pks)).filter(stale).update(last_used_at=now)


class AccessAction(models.TextChoices):
    """What an access change did: to a service token, or to a person's roles and flags."""

    TOKEN_CREATED = "token_created"
    TOKEN_REVOKED = "token_revoked"
    ROLE_GRANTED = "role_granted"
    ROLE_REVOKED = "role_revoked"
    USER_CREATED = "user_created"
    USER_DEACTIVATED = "user_deactivated"
    USER_REACTIVATED = "user_reactivated"
    USER_DELETED = "user_deleted"
    STAFF_GRANTED = "staff_granted"
    STAFF_REVOKED = "staff_revoked"
    SUPERUSER_GRANTED = "superuser_granted"
    SUPERUSER_REVOKED = "superuser_revoked"
    IDENTITY_LINKED = "identity_linked"
    IDENTITY_UNLINKED = "identity_unlinked"
    KEY_CREATED = "key_created"
    KEY_ACTIVATED = "key_activated"
    KEY_RETIRED = "key_retired"
    KEY_RESEALED = "key_resealed"


class AccessChange(models.Model):
    """One change of who may do what (a token issued or revoked, a role or flag granted or
    taken): who made it, when, to whom. Append-only in the database, like the selection
    history (presets/migrations/0006_access_history.py); written by
    ``presets.access_history.record_access_change``."""

    time = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=AccessAction.choices)
    # The token's name or the person's username.
    subject = models.CharField(max_length=150)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            models.Index(fields=["time", "id"], name="presets_access_time"),
            models.Index(fields=["subject", "time", "id"], name="presets_access_subject_time"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.subject}"


# The issuer of an account's mark "made by single sign-on before sign-in identities were kept":
# its first sign-in since binds it to the identity that signs in (0008_sign_in_identities.py).
UNCLAIMED_ISSUER = "unclaimed"
# The OpenID Connect limit on a subject; issuers are URLs well below it.
IDENTITY_MAX = 255


class SignInIdentity(models.Model):
    """A person at an identity provider (its issuer, and the subject it names them by, which it
    never reuses) and the account here that single sign-on signs them in to. Usernames are not
    identities: a provider lets whoever its administrators allow carry a name, so a name alone
    never decides whose account a sign-in opens. Made at a person's first sign-in, or by an
    administrator linking an existing account (the admin); recorded in the access history
    (``presets.access_history.link_identity``)."""

    issuer = models.CharField(max_length=IDENTITY_MAX)
    subject = models.CharField(max_length=IDENTITY_MAX)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sign_in_identities")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "sign-in identity"
        verbose_name_plural = "sign-in identities"
        ordering = ["issuer", "subject"]
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="presets_identity_once",
                violation_error_message="This identity is linked to an account already: unlink it there first.",
            ),
            # One identity per provider and account: a second would be a second person.
            models.UniqueConstraint(
                fields=["issuer", "user"],
                name="presets_identity_one_per_issuer",
                violation_error_message="This account is linked to an identity at this issuer already.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject}"

    @property
    def is_unclaimed(self) -> bool:
        """Whether this marks an account made before identities were kept, not yet signed in to since."""
        return self.issuer == UNCLAIMED_ISSUER

    @staticmethod
    def issuer_key(issuer: str) -> str:
        """``issuer`` as identities are kept: an issuer URL with and without its final slash is
        one provider (OIDC_ISSUER as configured, ``iss`` as the provider writes it)."""
        return issuer.strip().rstrip("/")


class SigningKey(models.Model):
    """An Ed25519 key the chain documents are signed with (``presets/signing.py``).

    One key signs at a time: the one activated last and not retired. Services trust keys by
    their public half (``manage.py signing_keys public``); a key created but not yet activated
    is listed there already, so services can trust it before it signs anything, and the key
    it replaces stays listed until ``retires_at`` (the overlap). The private half is stored
    sealed (AES-GCM, ``presets/key_sealing.py``) with a key the database never holds
    (``SIGNING_KEYS_SECRET``, or one derived from ``SECRET_KEY``): a dump of the database alone
    cannot sign documents services trust."""

    key_id = models.CharField(max_length=40, unique=True)
    # Raw, base64url without padding: 32 bytes.
    public_key = models.CharField(max_length=64)
    # The raw private half sealed for this key id (nonce, ciphertext and tag; base64url), and
    # the fingerprint of the sealing key (``presets.key_sealing``).
    sealed_private_key = models.TextField()
    sealed_with = models.CharField(max_length=16)
    created_at = models.DateTimeField(default=timezone.now)
    activated_at = models.DateTimeField(null=True, blank=True)
    retires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.key_id


class PresetsRevision(models.Model):
    """A reviewed presets file as an environment got it: by a sync (the first environment) or
    by a promotion (each next one, ``audit.promotions``). An environment serves its newest."""

    environment = models.SlugField(max_length=ENVIRONMENT_MAX)
    sha256 = models.CharField(max_length=64)
    name = models.CharField(max_length=255, help_text="the file's name when it was synced")
    text = models.TextField(help_text="the file as reviewed, which a promotion carries to the next environment")
    applied_at = models.DateTimeField()
    applied_by = models.CharField(max_length=150)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["environment", "-id"], name="presets_revision_latest")]

    def __str__(self) -> str:
        return f"{self.environment}: {self.name} sha256 {self.sha256[:12]}"

    @classmethod
    def current(cls, environment: str) -> PresetsRevision | None:
        """The revision ``environment`` serves: the last it got."""
        return cls.objects.filter(environment=environment).order_by("-id").first()

    @classmethod
    def record(
        cls, presets_file: Any, *, environment: str, now: datetime, actor: str = "system:sync"
    ) -> PresetsRevision:
        """``presets_file`` (a ``presets_file.PresetsFile``) as ``environment``'s revision from
        ``now``, unless it already serves the same file (a sync of an unchanged file keeps the
        time it has served it since)."""
        current = cls.current(environment)
        if current is not None and current.sha256 == presets_file.sha256:
            return current
        return cls.objects.create(
            environment=environment,
            sha256=presets_file.sha256,
            name=presets_file.path.rsplit("/", 1)[-1],
            text=presets_file.text,
            applied_at=now,
            applied_by=actor,
        )
