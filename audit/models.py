"""Audit models. The selection history itself is django-simple-history's table on Selection;
alerts (DESIGN §9) and the notifications of changes and resolutions live here.

An alert is raised once per (kind, chain, version), enforced by a unique constraint, so two
sweeps racing can never raise it twice:

- ``stale_pin``: ``version`` is the version where the pin *started* (the select or restore
  that made the preset live). Extending a pin or a sync of its definition makes new versions
  of the same pin, so they neither re-raise nor resolve the alert; a pin that is replaced by
  another preset, reverted or expired ends, and its alert is resolved.
- ``pin_expired``: ``version`` is the version the automatic revert created. It reports an
  event, so it is born resolved (``?open=true`` lists only conditions still going on).
- ``provider_failing`` and ``provider_credentials`` (from the fleet's provider health):
  ``subject`` names the step (``vendor_a/large``) or the provider (``vendor_a``), and
  ``version`` is the chain's version when it was raised. At most one is open per (kind,
  chain, subject); it resolves itself when the condition ends, and a later one is new.
- ``publish_forged`` (``audit.publish_alerts``): a publishing target held a document that was
  not the control plane's, and it was replaced. ``subject`` names the target, ``version`` is the
  chain's version (the control plane's record) when it was found. An event, raised at every
  replacement: each is a write by someone else.
- ``spend`` (``audit.spend_alerts``): ``subject`` is ``total`` (the chain's spend) or
  ``fallback`` (what its steps other than the live head cost); one open per (chain, subject),
  resolved when the pace is back under its bound.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from presets import environments
from presets.documents import format_duration, format_time
from presets.models import Chain, Drill, PresetsRevision, ServiceToken
from presets.wire import LATENCY_BOUNDS_MS


class AlertKind(models.TextChoices):
    STALE_PIN = "stale_pin"
    PIN_EXPIRED = "pin_expired"
    PROVIDER_FAILING = "provider_failing"
    PROVIDER_CREDENTIALS = "provider_credentials"
    PLAN_SUSPENDED = "plan_suspended"
    PLAN_MISSED = "plan_missed"
    GUARD_RESTORED = "guard_restored"
    PUBLISH_FORGED = "publish_forged"
    DRILL_FAILED = "drill_failed"  # a failover drill failed or was aborted (``audit.drills``)
    DRILL_PASSED = "drill_passed"  # a failover drill passed: its summary, told like an alert
    SPEND = "spend"  # a chain's spend, or its fallback steps', ran past its bound (``audit.spend_alerts``)


PIN_ALERTS = (AlertKind.STALE_PIN, AlertKind.PIN_EXPIRED)
PROVIDER_ALERTS = (AlertKind.PROVIDER_FAILING, AlertKind.PROVIDER_CREDENTIALS)
# A planned pin's alerts: ``subject`` is "plan #<id>"; one open per plan.
PLAN_ALERTS = (AlertKind.PLAN_SUSPENDED, AlertKind.PLAN_MISSED)
# A publishing target's alert: ``subject`` is the target ("directory /srv/chains", "s3://...").
PUBLISH_ALERTS = (AlertKind.PUBLISH_FORGED,)
# A drill's alerts: ``subject`` is "drill <id>"; one per drill (each is an event).
DRILL_ALERTS = (AlertKind.DRILL_FAILED, AlertKind.DRILL_PASSED)
# A spend alert: ``subject`` is "total" or "fallback"; one open per chain and subject.
SPEND_ALERTS = (AlertKind.SPEND,)
# Alerts kept once while one is open for (kind, chain, subject); an event among them is never
# open (it is raised resolved), so each one raised is new.
SUBJECT_ALERTS = PROVIDER_ALERTS + PLAN_ALERTS + PUBLISH_ALERTS + DRILL_ALERTS + SPEND_ALERTS
# Alerts that report something that happened rather than a condition: raised already
# resolved (``raise_alert(resolution=...)``), so the pages show them as events, not "resolved",
# and PagerDuty is not paged for them.
EVENT_KINDS = frozenset(
    {
        AlertKind.PIN_EXPIRED,
        AlertKind.PLAN_MISSED,
        AlertKind.GUARD_RESTORED,
        AlertKind.PUBLISH_FORGED,
        AlertKind.DRILL_FAILED,
        AlertKind.DRILL_PASSED,
    }
)


def page_url(environment: str, path: str) -> str:
    """A page's address for a notification, a deep link or Slack (``PUBLIC_BASE_URL``), in
    ``environment``: under ``/env/<environment>`` unless it is the default
    (``environments.path_in``)."""
    return f"{settings.PUBLIC_BASE_URL.rstrip('/')}{environments.path_in(environment, path)}"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


# The namespace of the event ids derived from a row (``Alert.raised_event_id``).
EVENT_IDS = uuid.UUID("5b0f4d52-7a4e-4f61-9c1e-0c6f2a9d3e17")


class Deliverable(models.Model):
    """Something the notifiers deliver, with its delivery state per notifier: an alert being
    raised (``Alert``), a change or an alert's resolution (``Notification``).

    ``deliveries`` maps each notifier to ``{"state": "pending|delivered|failed", "attempts":
    n, "last_error": str, "delivered_at": time|None}``; ``audit.delivery`` moves them on."""

    deliveries = models.JSONField(default=dict)
    # When a sweep should next hand the pending deliveries to a worker; null when none is
    # pending. Queuing a delivery task moves it ahead (a lease), so that sweeps do not queue a
    # second task while the first waits or backs off, yet take over if it was lost.
    delivery_due_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        abstract = True

    def pending_deliveries(self) -> list[str]:
        """The notifiers that still have to deliver this."""
        return [name for name, d in self.deliveries.items() if d["state"] == DeliveryState.PENDING]


class Alert(Deliverable):
    """Something about a chain that a person should know, with its delivery per notifier.

    ``details`` holds the facts at the time it was raised (``preset``, ``actor``,
    ``reason``, ``pin_version``, ``pinned_by``, ``pinned_at``, ``expires_at``,
    ``age_seconds``).
    ``deliveries`` is the delivery of its raising to each notifier (``log``, ``webhook``,
    ``slack``, ``pagerduty``, ``email``); its resolution's is its ``resolution_notification``."""

    kind = models.CharField(max_length=20, choices=AlertKind.choices)
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="alerts")
    version = models.PositiveIntegerField()
    subject = models.CharField(
        max_length=201, blank=True, default="", help_text="provider alerts: the step or provider concerned"
    )
    message = models.TextField()
    details = models.JSONField(default=dict)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=600, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "chain", "version"],
                condition=models.Q(kind__in=PIN_ALERTS),
                name="alert_once_per_kind_chain_version",
            ),
            models.UniqueConstraint(
                fields=["kind", "chain", "subject"],
                condition=models.Q(kind__in=PROVIDER_ALERTS, resolved_at__isnull=True),
                name="provider_alert_one_open",
            ),
            models.UniqueConstraint(
                fields=["kind", "chain", "subject"],
                condition=models.Q(kind__in=PLAN_ALERTS, resolved_at__isnull=True),
                name="plan_alert_one_open",
            ),
            models.UniqueConstraint(
                fields=["kind", "chain", "subject"],
                condition=models.Q(kind__in=SPEND_ALERTS, resolved_at__isnull=True),
                name="spend_alert_one_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.chain.name} v{self.version}"

    @property
    def is_open(self) -> bool:
        """Whether the condition it reports is still going on."""
        return self.resolved_at is None

    @property
    def age(self) -> str:
        """How long the pin had been live when the alert was raised, readable."""
        return format_duration(self.details.get("age_seconds") or 0)

    @property
    def chain_url(self) -> str:
        """The chain's page in the web UI (in its environment), where the pin can be kept or reverted."""
        return page_url(self.chain.environment, f"/chains/{self.chain.name}/")

    @property
    def is_event(self) -> bool:
        """Whether it reports something that happened (raised resolved), not a condition."""
        return self.kind in EVENT_KINDS

    @property
    def dedup_key(self) -> str:
        """The key PagerDuty groups this alert's trigger and resolve under."""
        return f"controlplane-alert-{self.pk}"

    @property
    def raised_event_id(self) -> str:
        """The id of the event "this alert was raised", the same on every retry of its delivery."""
        return str(uuid.uuid5(EVENT_IDS, f"alert {self.pk} raised {self.created_at.isoformat()}"))

    def to_document(self) -> dict[str, Any]:
        """The alert as JSON: the webhook's body, and (with ``deliveries``) the API's entry."""
        details = self.details
        return {
            "id": self.pk,
            "kind": self.kind,
            "chain": self.chain.name,
            "environment": self.chain.environment,
            "version": self.version,
            "preset": details.get("preset"),
            "actor": details.get("actor"),
            "reason": details.get("reason"),
            "pin_version": details.get("pin_version"),
            "pinned_by": details.get("pinned_by"),
            "pinned_at": details.get("pinned_at"),
            "expires_at": details.get("expires_at"),
            "age_seconds": details.get("age_seconds"),
            "age": self.age,
            "subject": self.subject,
            "message": self.message,
            "url": self.chain_url,
            "created_at": format_time(self.created_at),
            "resolved_at": format_time(self.resolved_at),
            "resolution": self.resolution,
        }


class NotificationKind(models.TextChoices):
    CHANGE = "change"
    ALERT_RESOLVED = "alert.resolved"


class Notification(Deliverable):
    """A change of what a chain serves, or an alert's resolution, to tell the notifiers that
    take it (``audit.notifications``), with its delivery per notifier.

    ``details`` is the change as a history entry (``presets.history.HistoryEntry``) at the time
    it was made; empty for a resolution, which is told from its alert. ``event_id`` is the id
    receivers see, the same on every retry."""

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(max_length=20, choices=NotificationKind.choices)
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="notifications")
    version = models.PositiveIntegerField(help_text="the change's version; a resolution: its alert's")
    alert = models.OneToOneField(
        Alert, null=True, blank=True, on_delete=models.PROTECT, related_name="resolution_notification"
    )
    details = models.JSONField(default=dict)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.chain.name} v{self.version}"

    @property
    def chain_url(self) -> str:
        """The chain's page in the web UI, in its environment."""
        return page_url(self.chain.environment, f"/chains/{self.chain.name}/")


# --- fleet status (audit.fleet_recorder writes instances, audit.usage the reports) --------

MAX_CLIENT_LENGTH = 200


class FleetInstance(models.Model):
    """One service instance following one chain."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="instances")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    applied_version = models.PositiveIntegerField()
    version_seen_at = models.DateTimeField(help_text="when this instance was first seen on it")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    # The token whose read (or relay's fleet report) first recorded the instance: its row
    # counts against that token's FLEET_MAX_INSTANCES_PER_TOKEN (``audit.fleet_recorder``).
    # Null: recorded before tokens were (or a session's read, or the token was deleted).
    token = models.ForeignKey(
        ServiceToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        ordering = ["chain", "client"]
        constraints = [models.UniqueConstraint(fields=["chain", "client"], name="fleet_instance_unique")]
        indexes = [
            # The live instances (seen within FLEET_INSTANCE_TTL_MINUTES): rows of instances
            # long gone stay in the table, and fleet status must not read them.
            models.Index(fields=["chain", "last_seen_at"], name="fleet_instance_live"),
            # A token's rows, newest first: the cap keeps the newest and prunes the rest.
            models.Index(fields=["token", "last_seen_at"], name="fleet_instance_token"),
        ]

    def __str__(self) -> str:
        return f"{self.client} on {self.chain.name} v{self.applied_version}"


class RefusedReason(models.TextChoices):
    """Why some of a token's evidence was not kept."""

    INSTANCES_PRUNED = "instances_pruned"
    """Instance rows pruned (oldest first) past the token's FLEET_MAX_INSTANCES_PER_TOKEN."""
    SEEN_NOT_RELAY = "seen_not_relay"
    """A fleet report (``POST /api/v1/fleet/seen``) from a token whose purpose is not relay."""
    SEEN_TOO_MANY = "seen_too_many"
    """A fleet report past FLEET_SEEN_PER_TOKEN_PER_MINUTE."""
    REPORTS_NOT_ALLOWED = "reports_not_allowed"
    """A usage report from a token that may not send them."""
    REPORTS_TOO_MANY = "reports_too_many"
    """A usage report past one of the USAGE_REPORTS_PER_*_PER_MINUTE limits."""


class RefusedEvidence(models.Model):
    """How much of one token's evidence was refused or pruned, and when last
    (``audit.evidence.count_refused``): what /metrics counts per token, and (pruned instance
    rows, per chain) which tokens fleet status says reached their cap."""

    token = models.CharField(max_length=100, help_text="the token's name")
    chain = models.CharField(max_length=100, blank=True, help_text="pruned instance rows: their chain")
    reason = models.CharField(max_length=20, choices=RefusedReason.choices)
    count = models.PositiveBigIntegerField(default=0)
    last_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "chain", "reason"], name="refused_evidence_unique")]
        indexes = [models.Index(fields=["reason", "chain", "last_at"], name="refused_evidence_recent")]

    def __str__(self) -> str:
        return f"{self.token} {self.reason} {self.chain}: {self.count}"


class ProviderUsage(models.Model):
    """Requests an instance reports a provider served for a chain."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="usage")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    provider = models.CharField(max_length=100)
    requests = models.PositiveBigIntegerField(default=0)
    last_served_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chain", "client", "provider"], name="usage_unique")]


class RejectedVersion(models.Model):
    """A chain version an instance refused to apply, and why."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="rejections")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    version = models.PositiveIntegerField()
    reason = models.CharField(max_length=500)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at"]
        constraints = [models.UniqueConstraint(fields=["chain", "client", "version"], name="rejection_unique")]
        # One version's refusals, newest first (fleet status lists them; a whole fleet may
        # refuse a version, and every version's refusals stay).
        indexes = [models.Index(fields=["chain", "version", "-at"], name="rejection_of_version")]


# --- provider health (audit.provider_health writes and reads it) ---------------------------

# The classes that are the provider's failures (``audit.provider_health`` says why).
ERROR_CLASSES = (
    "credentials",
    "rate_limited",
    "server_error",
    "timeout",
    "unknown",
    "unavailable",
    "verify_failed",
    "interrupted",
    "other",
)
# One field per bucket of the served-latency histogram (presets.wire.LATENCY_BOUNDS_MS).
LATENCY_FIELDS = tuple(f"latency_{i}" for i in range(len(LATENCY_BOUNDS_MS) + 1))
# One field per bucket of the time-to-first-chunk histogram of streamed attempts (same bounds).
FIRST_CHUNK_FIELDS = tuple(f"first_chunk_{i}" for i in range(len(LATENCY_BOUNDS_MS) + 1))


class ProviderHealthMinute(models.Model):
    """What the fleet reported about one step (provider and model) of one chain in one
    minute: attempts by outcome class, served latency and streamed attempts' time to their
    first chunk as histograms, the tokens the attempts said they used, breaker openings.
    Reports add to it (``F()`` updates), so any number of instances merge into one row."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="provider_health")
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=100, help_text="blank on a provider's breaker-openings row")
    minute = models.DateTimeField(help_text="the minute the reports arrived in (UTC, truncated)")
    served = models.PositiveBigIntegerField(default=0)
    rejected = models.PositiveBigIntegerField(default=0)
    credentials = models.PositiveBigIntegerField(default=0)
    rate_limited = models.PositiveBigIntegerField(default=0)
    server_error = models.PositiveBigIntegerField(default=0)
    timeout = models.PositiveBigIntegerField(default=0)
    unknown = models.PositiveBigIntegerField(default=0)
    content_policy = models.PositiveBigIntegerField(default=0)
    unavailable = models.PositiveBigIntegerField(default=0)
    verify_failed = models.PositiveBigIntegerField(default=0)
    interrupted = models.PositiveBigIntegerField(default=0)
    other = models.PositiveBigIntegerField(default=0)
    latency_0 = models.PositiveBigIntegerField(default=0)
    latency_1 = models.PositiveBigIntegerField(default=0)
    latency_2 = models.PositiveBigIntegerField(default=0)
    latency_3 = models.PositiveBigIntegerField(default=0)
    latency_4 = models.PositiveBigIntegerField(default=0)
    latency_5 = models.PositiveBigIntegerField(default=0)
    latency_6 = models.PositiveBigIntegerField(default=0)
    latency_7 = models.PositiveBigIntegerField(default=0)
    latency_8 = models.PositiveBigIntegerField(default=0)
    first_chunk_0 = models.PositiveBigIntegerField(default=0)
    first_chunk_1 = models.PositiveBigIntegerField(default=0)
    first_chunk_2 = models.PositiveBigIntegerField(default=0)
    first_chunk_3 = models.PositiveBigIntegerField(default=0)
    first_chunk_4 = models.PositiveBigIntegerField(default=0)
    first_chunk_5 = models.PositiveBigIntegerField(default=0)
    first_chunk_6 = models.PositiveBigIntegerField(default=0)
    first_chunk_7 = models.PositiveBigIntegerField(default=0)
    first_chunk_8 = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    served_with_tokens = models.PositiveBigIntegerField(
        default=0, help_text="served attempts whose tokens are in the sums; the other served ones are unknown"
    )
    breaker_openings = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "provider", "model", "minute"], name="provider_health_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="provider_health_by_minute")]

    def __str__(self) -> str:
        return f"{self.chain.name} {self.provider}/{self.model} at {format_time(self.minute)}"


class ProviderTokenTotal(models.Model):
    """The tokens of a chain's step in minutes the health window no longer keeps: ``prune``
    adds a minute's tokens here as it deletes it, so the tokens counted since the first report
    (``/metrics``' ``chain_tokens_total``) never go back."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="token_totals")
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=100)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chain", "provider", "model"], name="provider_token_total")]


class ProviderReporter(models.Model):
    """An instance that reported on a step of a chain, and when it last did (how many
    instances stand behind a step's figures; which saw its credentials rejected). Only an
    instance fleet status knows reports health, so it is that instance's row."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="provider_reporters")
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=100)
    # Not indexed alone: the instance's rows go with it (a cascade), rarely.
    instance = models.ForeignKey(
        FleetInstance, on_delete=models.CASCADE, related_name="provider_reports", db_index=False
    )
    last_reported_at = models.DateTimeField()
    last_credentials_failure_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "provider", "model", "instance"], name="provider_reporter_unique")
        ]
        indexes = [models.Index(fields=["chain", "last_reported_at"], name="provider_reporter_recent")]


class ProviderEvidence(models.Model):
    """What one instance that polls its chain reported about one step in one minute, and with
    which token: the evidence provider alerts weigh (``audit.provider_health``
    ``failing_evidence``, ``credential_evidence``), kept for their window only.

    Only an instance fleet status knows (it read its chain lately) has any, so the rows are
    bounded by the instances that poll, the registry's steps and the window."""

    # Not indexed alone: the unique constraint's index starts with it.
    instance = models.ForeignKey(
        FleetInstance, on_delete=models.CASCADE, related_name="provider_evidence", db_index=False
    )
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=100)
    minute = models.DateTimeField(help_text="the minute the reports arrived in (UTC, truncated)")
    token = models.CharField(max_length=100, help_text="the service token of the instance's last report that minute")
    served = models.PositiveBigIntegerField(default=0)
    credentials = models.PositiveBigIntegerField(default=0)
    rate_limited = models.PositiveBigIntegerField(default=0)
    server_error = models.PositiveBigIntegerField(default=0)
    timeout = models.PositiveBigIntegerField(default=0)
    unknown = models.PositiveBigIntegerField(default=0)
    unavailable = models.PositiveBigIntegerField(default=0)
    verify_failed = models.PositiveBigIntegerField(default=0)
    interrupted = models.PositiveBigIntegerField(default=0)
    other = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["instance", "provider", "model", "minute"], name="provider_evidence_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="provider_evidence_by_minute")]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} from instance {self.instance_id} at {format_time(self.minute)}"


class ReportWindow(models.Model):
    """How many usage reports one key sent in its current minute (``audit.usage.admit``): an
    instance fleet status knows (``instance:<id>``), the instances it does not know of one
    token on one chain together (``unknown:<chain>:<token>``), a token (``token:<id>``), a
    chain (``chain:<id>``). A report is counted under all its keys or under none."""

    key = models.CharField(max_length=64, primary_key=True)
    window_start = models.DateTimeField(help_text="the minute counted (UTC, truncated)")
    reports = models.PositiveIntegerField()
    allowed = models.PositiveIntegerField(help_text="the limit the last report was counted against")

    def __str__(self) -> str:
        return f"{self.key}: {self.reports} of {self.allowed} at {format_time(self.window_start)}"


# --- failover drills (``audit.drills``: what the fleet reported of each) -------------------


class DrillInstance(models.Model):
    """What one instance reported of one drill: the sums of its usage reports' ``drill``
    sections, taken only from an instance fleet status knows (bounded like its health)."""

    drill = models.ForeignKey(Drill, on_delete=models.CASCADE, related_name="instances")
    client = models.CharField(max_length=MAX_CLIENT_LENGTH)
    token = models.CharField(max_length=100, help_text="the name of the token its reports came with")
    requests = models.PositiveBigIntegerField(default=0)
    drilled = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    deadline = models.PositiveBigIntegerField(default=0)
    refusals = models.PositiveBigIntegerField(default=0)
    fallback_attempts = models.PositiveBigIntegerField(default=0)
    fallback_failures = models.PositiveBigIntegerField(default=0)
    # Drilled requests by the 1-based step that served them ("2": 81).
    ended_on = models.JSONField(default=dict)
    # Whole-request latency histograms over LATENCY_BOUNDS_MS (+1): drilled, and the others.
    latency_drilled = models.JSONField(default=list)
    latency_other = models.JSONField(default=list)
    first_report_at = models.DateTimeField()
    last_report_at = models.DateTimeField()

    class Meta:
        ordering = ["drill", "client"]
        constraints = [models.UniqueConstraint(fields=["drill", "client"], name="drill_instance_unique")]

    def __str__(self) -> str:
        return f"{self.client} in drill {self.drill_id}"


class DrillMinute(models.Model):
    """The whole fleet's counts of one drill in one minute: the report page's plots."""

    drill = models.ForeignKey(Drill, on_delete=models.CASCADE, related_name="minutes_reported")
    minute = models.DateTimeField()
    requests = models.PositiveBigIntegerField(default=0)
    drilled = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    ended_on = models.JSONField(default=dict)
    latency_drilled = models.JSONField(default=list)
    latency_other = models.JSONField(default=list)

    class Meta:
        ordering = ["drill", "minute"]
        constraints = [models.UniqueConstraint(fields=["drill", "minute"], name="drill_minute_unique")]

    def __str__(self) -> str:
        return f"drill {self.drill_id} at {self.minute:%H:%M}"


class PromotionState(models.TextChoices):
    PENDING = "pending"  # its evidence held; a second person's approval is awaited (PROMOTION_APPROVAL)
    PROMOTED = "promoted"  # the next environment got the presets revision


class Promotion(models.Model):
    """A presets revision carried from one environment to the next (``audit.promotions``),
    with the evidence it was granted on: how long the lower environment served it, its health
    before and after, the drills it passed there, and who asked and approved."""

    source = models.SlugField(max_length=30, help_text="the environment it was promoted from")
    target = models.SlugField(max_length=30, help_text="the environment it was promoted to")
    revision = models.ForeignKey(PresetsRevision, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=10, choices=PromotionState.choices)
    requested_by = models.CharField(max_length=150)
    requested_at = models.DateTimeField()
    reason = models.CharField(max_length=500)
    approved_by = models.CharField(max_length=150, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(default=dict, help_text="the evidence as judged when it was granted")
    changes = models.JSONField(default=list, help_text="what the target environment's sync changed, line by line")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            models.Index(fields=["target", "-requested_at"], name="promotion_by_target"),
            models.Index(fields=["source", "-requested_at"], name="promotion_by_source"),
        ]

    def __str__(self) -> str:
        return f"promotion {self.pk}: {self.source} -> {self.target} ({self.state})"
