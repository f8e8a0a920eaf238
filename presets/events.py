"""What the domain tells the rest of the system, without knowing who listens.

Both are sent inside the change's transaction, so what a receiver writes or sends commits
(or rolls back) with the change itself. Receivers are connected in the apps' ``ready()``:
``presets.read_path.notifications`` announces every change to the web processes;
``audit.alerts`` reports every expired pin; ``audit.notifications`` tells the notifiers
(webhook, Slack, PagerDuty, email) about every change.
"""

from __future__ import annotations

from django.dispatch import Signal

# A chain's document changed: a new version, or the epoch it carries was raised.
# Arguments: ``selection`` (the new state, chain loaded), ``epoch`` (int, or None to read it).
selection_changed = Signal()

# The expiry sweep reverted a pin; ``selection`` is the revert (its ``previous_*`` fields
# describe the pin) and ``now`` the sweep's time.
pin_expired = Signal()
