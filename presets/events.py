"""What the domain tells the rest of the system, without knowing who listens.

Each is sent inside its change's transaction, so what a receiver writes or sends commits
(or rolls back) with the change itself. Receivers are connected in the apps' ``ready()``:
``read_path.notifications`` announces every change to the web processes;
``audit.alerts`` reports every expired pin; ``audit.notifications`` tells the notifiers
(webhook, Slack, PagerDuty, email) about every change; ``presets.publishing`` publishes every
chain's document anew after a change or a key's activation (connected in ``PresetsConfig``).
``publish_replaced`` is the one sent outside any change: by the publisher, after its write.
"""

from __future__ import annotations

from django.dispatch import Signal

# A chain's document changed: a new version, or the epoch it carries was raised.
# Arguments: ``selection`` (the new state, chain loaded), ``epoch`` (the one its document
# carries, held until the change commits: ``models.epoch_held``), ``raised`` (True when only
# the epoch was raised: no new version, nothing changed in what the chain serves).
selection_changed = Signal()

# A signing key was activated (``signing.create_key`` for the first key, ``activate_key``):
# every document is signed anew by it from now on. Argument: ``key`` (the ``SigningKey``).
signing_key_activated = Signal()

# The expiry sweep reverted a pin; ``selection`` is the revert (its ``previous_*`` fields
# describe the pin) and ``now`` the sweep's time.
pin_expired = Signal()

# A planned pin's start found a conflict and did not start it (``presets.plans``): ``plan``
# (its ``state_reason`` says why), ``selection`` (the chain as it serves now), ``now``.
plan_suspended = Signal()

# A plan's end came before it started (no worker ran in its window): ``plan``, ``now``.
plan_missed = Signal()

# A suspended plan was settled (started anyway, changed, cancelled or missed): ``plan``,
# ``now``, ``resolution`` (what happened, for its alert).
plan_settled = Signal()

# The publisher found, at a target, a document that was not the control plane's (it does not
# verify with the trusted keys, or claims an (epoch, version) beyond the chain's record) and
# replaced it with the chain's current one (``presets.publishing``); sent after the write, in
# no transaction. Argument: ``replaced`` (``publishing.Replaced``: the target, what it held,
# why it did not count, the record, what replaced it; ``str()`` says it in one line).
publish_replaced = Signal()

# A failover drill ended (``presets.drills``: its window closed and it was judged, it was
# aborted by a person or a stop condition, or a change took it out of the document), in the
# transaction that ended it. Arguments: ``drill`` (its ``verdict`` and ``reasons`` say how),
# ``now``. Sent once per drill, when its verdict is final.
drill_ended = Signal()
